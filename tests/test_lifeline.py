"""Processes gradfix starts do not outlive it (a ``kill -9`` of the main process)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

#: A batch of 20 files in 2 workers whose every file takes a minute: each worker writes
#: its pid, then sleeps until killed (``process_file`` patched before the pool forks).
BATCH = """
import os, sys, time
import gradfix.lifeline, gradfix.runner
from gradfix.registry import select_rules

folder = sys.argv[1]
if sys.argv[2] == "watchdog-only":
    gradfix.lifeline.ask_kernel_to_kill_orphan = lambda: False

def slow(path, options):
    with open(os.path.join(folder, f"worker-{os.getpid()}"), "w"):
        pass
    time.sleep(60)

gradfix.runner.process_file = slow
paths = [os.path.join(folder, f"m{i}.py") for i in range(20)]
for path in paths:
    open(path, "w").close()
options = gradfix.runner.RunOptions(rules=select_rules(["ALL"], []))
gradfix.runner.process_files(paths, options, jobs=2)
"""


def alive(pid: int) -> bool:
    """The process exists and is not a zombie waiting for a parent to reap it."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("how", ["prctl", "watchdog-only"])
def test_workers_die_within_seconds_of_a_kill_9_of_the_main_process(
    tmp_path: Path, how: str
) -> None:
    main = subprocess.Popen([sys.executable, "-c", BATCH, str(tmp_path), how])
    try:
        deadline = time.monotonic() + 60
        while len(workers := list(tmp_path.glob("worker-*"))) < 2:
            assert main.poll() is None, "the batch ended before its workers started"
            assert time.monotonic() < deadline, "no 2 workers within 60 s"
            time.sleep(0.1)
        pids = [int(path.name.split("-")[1]) for path in workers]
        assert all(alive(pid) for pid in pids)
    finally:
        main.send_signal(signal.SIGKILL)
        main.wait()
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [pid for pid in pids if alive(pid)]
    for pid in left:  # do not leave them to the rest of the suite
        os.kill(pid, signal.SIGKILL)
    assert left == [], f"workers still alive 10 s after their parent was killed: {left}"


FORKSERVER_BATCH = """
import multiprocessing, os, sys
import gradfix.runner
from gradfix.registry import select_rules

multiprocessing.set_start_method("forkserver", force=True)
folder = sys.argv[1]
paths = [os.path.join(folder, f"m{i}.py") for i in range(20)]
for path in paths:
    with open(path, "w") as out:
        out.write("import torch\\nw = torch.randn(3, requires_grad=True)\\nw.normal_()\\n")
options = gradfix.runner.RunOptions(rules=select_rules())
results = gradfix.runner.process_files(paths, options, jobs=2)
print(sorted({(r.error, len(r.findings)) for r in results}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="forkserver")
def test_workers_under_a_fork_server_stay_while_the_main_process_lives(tmp_path: Path) -> None:
    """A worker's parent is then the fork server, not the main process: the lifeline
    watches both and the batch runs (Python 3.14 makes forkserver the default)."""
    done = subprocess.run(
        [sys.executable, "-c", FORKSERVER_BATCH, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[(None, 1)]"
