"""Worker processes that end with the process that started them.

A ``ProcessPoolExecutor`` worker waits on a pipe that it holds open itself, so when the
main process is killed (``kill -9``, the OOM killer) nothing tells it to stop: it stayed
alive, forever, in 6 of 6 trials. :func:`die_with_parent`, called first thing in a worker,
asks Linux to kill the worker when its parent dies (``PR_SET_PDEATHSIG``, through
``prctl`` with ctypes) and, everywhere, starts a watchdog thread that ends the worker
once its parent changed (it was handed to init or a subreaper) or the main process is
gone (with a fork server between them).

    pool = ProcessPoolExecutor(initializer=die_with_parent, initargs=(os.getpid(),))
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time

#: ``prctl``'s option for the signal sent to a process when its parent dies (linux/prctl.h)
PR_SET_PDEATHSIG = 1
#: how often the watchdog looks at the parent (seconds): a worker outlives its parent by
#: at most this long where the kernel cannot be asked
WATCH_SECONDS = 0.5
#: the exit status of a worker that ended because its parent died
ORPHANED = 1


def die_with_parent(parent: int) -> None:
    """End this process when ``parent`` (the pid of the process that started the pool)
    dies. The worker's own parent may be a fork server rather than ``parent``: the
    watchdog ends the worker when either goes."""
    ask_kernel_to_kill_orphan()
    started_under = os.getppid()
    if not _alive(parent):  # died before the kernel was asked
        os._exit(ORPHANED)
    threading.Thread(
        target=_watch, args=(parent, started_under), name="gradfix-lifeline", daemon=True
    ).start()


def ask_kernel_to_kill_orphan() -> bool:
    """Linux: SIGKILL this process when the thread that started it ends; False where
    there is no ``prctl`` (the watchdog alone stops the process there)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _watch(parent: int, started_under: int) -> None:
    while os.getppid() == started_under and _alive(parent):
        time.sleep(WATCH_SECONDS)
    os._exit(ORPHANED)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process now has the pid: ours is gone
        return False
    return True
