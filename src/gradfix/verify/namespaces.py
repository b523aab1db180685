"""The OS sandbox of a runner: Linux namespaces entered by the runner process itself.

A runner forked by the warm verifier must stay cheap (torch is already imported), so instead
of starting ``bwrap`` per script the runner calls the kernel facilities bubblewrap is built
on, right after its fork, before the script's first line (:func:`enter_namespaces`):

- ``unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET)``: a private mount table and a
  network namespace with nothing in it (no network, no abstract Unix sockets of the host);
  the user keeps its own uid (a one-line identity map);
- every mount made read-only (``mount_setattr(AT_RECURSIVE, MOUNT_ATTR_RDONLY)``);
- the project covered by an overlay whose upper layer is the job's ``upper/`` directory:
  the project still reads as itself, and whatever the program (or a process it started, or
  a libc call) changes there lands in ``upper/``, where the parent finds it after the run
  (a read-only project when the overlay cannot be mounted, e.g. on an overlay root);
- the verifier's private directories (socket, secret, output files) hidden under empty
  tmpfs mounts, ``/dev/shm`` private;
- only the job's ``work/`` (the mirror) and ``tmp/`` writable;
- then no capabilities and ``no_new_privs``: the program cannot unmount or remount any
  of the above (a user namespace it makes gets a locked copy), and no ``exec`` gives
  capabilities back.

Any failure raises :class:`OSError`; the caller then keeps the audit-hook guard alone.
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import os
from pathlib import Path

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 0x40000
AT_FDCWD = -100
AT_RECURSIVE = 0x8000
MOUNT_ATTR_RDONLY = 0x1
SYS_MOUNT_SETATTR = 442  # the same number on every architecture (new syscalls are unified)
PR_SET_NO_NEW_PRIVS = 38
CAPABILITY_VERSION_3 = 0x20080522


class _MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


_LIBC: ctypes.CDLL | None = None


def _libc() -> ctypes.CDLL:
    global _LIBC
    if _LIBC is None:
        _LIBC = ctypes.CDLL(None, use_errno=True)
    return _LIBC


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _unshare(flags: int) -> None:
    uid, gid = os.getuid(), os.getgid()  # unmapped (the overflow id) once unshared
    _check(_libc().unshare(flags), "unshare")
    Path("/proc/self/setgroups").write_text("deny")
    Path("/proc/self/uid_map").write_text(f"{uid} {uid} 1")
    Path("/proc/self/gid_map").write_text(f"{gid} {gid} 1")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str = "") -> None:
    result = _libc().mount(
        source.encode() if source else None,
        target.encode(),
        fstype.encode() if fstype else None,
        ctypes.c_ulong(flags),
        data.encode() if data else None,
    )
    _check(result, f"mount {target}")


def _set_readonly(target: str, readonly: bool, *, recursive: bool) -> None:
    attr = _MountAttr(MOUNT_ATTR_RDONLY if readonly else 0, 0 if readonly else MOUNT_ATTR_RDONLY)
    result = _libc().syscall(
        ctypes.c_long(SYS_MOUNT_SETATTR),
        ctypes.c_int(AT_FDCWD),
        target.encode(),
        ctypes.c_uint(AT_RECURSIVE if recursive else 0),
        ctypes.byref(attr),
        ctypes.c_size_t(ctypes.sizeof(attr)),
    )
    _check(result, f"mount_setattr {target}")


def _bind_writable(source_fd: int, target: str) -> None:
    """Mount the directory open as ``source_fd`` at ``target``, writable."""
    os.makedirs(target, exist_ok=True)
    _mount(f"/proc/self/fd/{source_fd}", target, None, MS_BIND | MS_REC)
    _set_readonly(target, False, recursive=False)


def _overlay(project: str, job: Path) -> bool:
    """The project read through an overlay whose changes land in ``job/upper``."""
    upper, work = job / "upper", job / "overlay-work"
    if not upper.is_dir() or not work.is_dir():
        return False
    options = f"lowerdir={project},upperdir={upper},workdir={work},userxattr"
    try:
        _mount("overlay", project, "overlay", 0, options)
    except OSError:
        return False  # the read-only project stays (upper/ then stays empty)
    return True


def enter_namespaces(job: Path, work: str, project: str | None, hidden: list[str]) -> str:
    """Confine this process (single-threaded: just forked, or a fresh runner) as the module
    docstring says; returns what the project is ("overlay" or "read-only")."""
    hide = _existing(hidden)
    _unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET)
    try:
        shape = _mount_sandbox(job, work, project, hide)
    finally:
        # no capability left, even when a mount failed: nothing can undo the mounts made
        # (a namespace the program makes copies them locked), no exec gives any back
        _drop_privileges()
    os.chdir(work)  # the bound mirror, not the read-only directory under it
    return shape


def _mount_sandbox(job: Path, work: str, project: str | None, hide: list[str]) -> str:
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    # opened in this mount namespace (a bind mount's source must be), before anything
    # below can cover them (a project or hidden directory holding the job)
    writable = {path: os.open(path, os.O_RDONLY | os.O_DIRECTORY) for path in (work, f"{job}/tmp")}
    try:
        # the overlay first: its upper layer is written through a mount of its own,
        # which the read-only flag below does not reach
        shape = "overlay" if project and _overlay(project, job) else "read-only"
        _set_readonly("/", True, recursive=True)
        if shape == "overlay":
            _set_readonly(project or "/", False, recursive=False)
        for directory in hide:
            _mount("tmpfs", directory, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0700,size=64k")
        if os.path.isdir("/dev/shm"):
            _mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")
        for path, fd in writable.items():
            _bind_writable(fd, path)
    finally:
        for fd in writable.values():
            os.close(fd)
    return shape


def _existing(patterns: list[str]) -> list[str]:
    found = [path for pattern in patterns for path in glob.glob(pattern)]
    return sorted({os.path.realpath(p) for p in found if os.path.isdir(p)})


def _drop_privileges() -> None:
    _check(_libc().prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl")
    header = (ctypes.c_uint32 * 2)(CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()
    _check(_libc().capset(header, data), "capset")


def available() -> bool:
    """Whether this machine lets a runner enter the OS sandbox (tried in a forked child
    on throw-away directories; a few milliseconds)."""
    import shutil
    import tempfile

    if not hasattr(os, "fork") or not os.path.exists("/proc/self/uid_map"):
        return False
    job = Path(tempfile.mkdtemp(prefix="gradfix-probe-"))
    for name in ("work", "tmp", "project", "upper", "overlay-work"):
        (job / name).mkdir()
    try:
        pid = os.fork()
        if pid == 0:
            try:
                enter_namespaces(job, str(job / "work"), str(job / "project"), [])
            except BaseException:  # noqa: BLE001 - the answer is the exit status
                os._exit(1)
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        return os.waitstatus_to_exitcode(status) == 0
    finally:
        with contextlib.suppress(OSError):
            os.chmod(job / "overlay-work" / "work", 0o700)
        shutil.rmtree(job, ignore_errors=True)
