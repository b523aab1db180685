"""The audit-hook guard of a runner: what the script does to files, processes and sockets.

Installed in every runner (:func:`install_guard`), with or without the OS sandbox
(:mod:`.namespaces`). An audit hook (:func:`sys.addaudithook`) sees each ``open``, ``os.*``
file operation, process start, ``ctypes`` symbol lookup and socket connection before it
happens, plus a wrapper of ``os.open`` (its audit event omits ``dir_fd``) and of
``torch.save`` (its zip writer opens files in C++):

- a write to a file of the mirror that links into the project first replaces the link by a
  private copy (the script sees its own files change; the project does not);
- any other change of the project (write, create, delete, rename, link, chmod, utime,
  truncate, mkdir...) is refused with :class:`PermissionError` and *recorded*: a run that
  tried to change the project is never "verified";
- the verifier's private directories (its socket, its secret) are refused and recorded;
- writes outside the job's ``work/`` and ``tmp/`` (the home directory, ``/tmp``) are
  refused and recorded as *outside*: blocked, but not a reason to doubt the verdict;
- without the OS sandbox, starting a process (``os.system``, ``subprocess``, ``exec``,
  ``posix_spawn``) and looking up libc's file functions through ``ctypes`` are refused and
  recorded, since neither would pass through this hook.

Each record is one JSON line appended to ``job/attempts.jsonl`` (opened before the script
runs), which the parent reads after the run (:func:`gradfix.verify.sandbox.read_report`).
A hook in the script's own process is a guard, not a boundary: the OS sandbox is.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import sys
from dataclasses import dataclass
from typing import Any

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
#: file operations and the positions of their (path, dir_fd) arguments; ``follow``: the
#: call acts on a link's target
_PATH_EVENTS: dict[str, tuple[tuple[int, int | None], ...]] = {
    "os.mkdir": ((0, 2),),
    "os.remove": ((0, 1),),
    "os.rmdir": ((0, 1),),
    "os.rename": ((0, 2), (1, 3)),
    "os.replace": ((0, 2), (1, 3)),
    "os.link": ((0, 2), (1, 3)),
    "os.symlink": ((1, 2),),
    "os.truncate": ((0, None),),
    "shutil.rmtree": ((0, None),),
    "os.chmod": ((0, 2),),
    "os.chown": ((0, 3),),
    "os.utime": ((0, 3),),
    "os.chflags": ((0, None),),
    "os.setxattr": ((0, None),),
    "os.removexattr": ((0, None),),
}
_FOLLOWING = frozenset({"os.truncate", "os.chmod", "os.chown", "os.utime", "os.link"})
_SPAWNS = frozenset({"os.system", "subprocess.Popen", "os.exec", "os.posix_spawn", "os.spawn"})
#: libc functions that write files or start processes, refused through ctypes without the
#: OS sandbox
_LIBC_WRITERS = frozenset({
    "open", "open64", "openat", "openat64", "creat", "creat64", "fopen", "fopen64",
    "freopen", "mkdir", "mkdirat", "unlink", "unlinkat", "rmdir", "rename", "renameat",
    "renameat2", "link", "linkat", "symlink", "symlinkat", "chmod", "fchmodat", "chown",
    "lchown", "fchownat", "utime", "utimes", "utimensat", "futimesat", "truncate",
    "truncate64", "remove", "system", "popen", "execv", "execve", "execvp", "execl",
    "execlp", "execle", "fork", "vfork", "posix_spawn", "posix_spawnp", "syscall",
    "mknod", "mknodat", "mkfifo", "setxattr", "removexattr", "dlopen",
})  # fmt: skip


@dataclass(frozen=True)
class Guard:
    """What a runner may touch: ``project`` (real path, or "" when none), the directories
    it may write (``writable``), the verifier's directories (``hidden``), its own socket,
    ``isolated`` (the OS sandbox holds processes and libc calls) and the log's fd."""

    project: str
    writable: tuple[str, ...]
    hidden: tuple[str, ...]
    own_socket: str
    isolated: bool
    log_fd: int


def install_guard(guard: Guard) -> None:
    """Runner side, before the script runs (see the module docstring)."""
    sys.addaudithook(functools.partial(_audit, guard))
    os.open = _wrap_os_open(guard, os.open)  # type: ignore[assignment]
    _wrap_torch_save(guard)


def record(guard: Guard, entry: dict[str, Any]) -> None:
    """Append ``entry`` to the run's log (what the parent reads after the run)."""
    line = json.dumps(entry, default=str) + "\n"
    try:
        os.write(guard.log_fd, line.encode("utf-8", "replace"))
    except OSError:
        pass


def _refuse(guard: Guard, kind: str, what: str) -> None:
    record(guard, {"kind": kind, "what": what})
    raise PermissionError(f"gradfix verify: {what} refused: {_WHY[kind]}")


_WHY = {
    "project": "it would change the project; verification writes nowhere in it",
    "verifier": "the verifier's own files are out of reach of the program it runs",
    "outside": "a verified program writes only in its working directory and temp dir",
    "process": "a process started here would not be guarded (no OS sandbox here)",
}


def _audit(guard: Guard, event: str, args: tuple[Any, ...]) -> None:
    if event == "open":
        _check_open(guard, args[0], args[1], args[2])
    elif event in _PATH_EVENTS:
        for position, dir_position in _PATH_EVENTS[event]:
            dir_fd = args[dir_position] if dir_position is not None else None
            path = _resolve(args[position], dir_fd, follow=event in _FOLLOWING)
            if path is not None:
                _check_change(guard, event, path, source=event == "os.link" and position == 0)
    elif event == "socket.connect":
        _check_connect(guard, args[1])
    elif event in _SPAWNS and not guard.isolated:
        _refuse(guard, "process", f"{event} {_short(args)}")
    elif event == "ctypes.dlsym" and not guard.isolated:
        name = args[1] if len(args) > 1 else ""
        if isinstance(name, str) and name in _LIBC_WRITERS:
            _refuse(guard, "process", f"ctypes lookup of libc {name}()")


def _check_open(guard: Guard, path: Any, mode: Any, flags: Any) -> None:
    if not _is_path(path):
        return
    name = os.path.abspath(os.fsdecode(os.fspath(path)))
    if _inside_any(os.path.realpath(name), guard.hidden):
        _refuse(guard, "verifier", f"open of {name!r}")
    if not _writes(mode, flags):
        return
    if guard.project:
        make_writable_here(name, guard.project, keep=_keeps_content(mode, flags))
    _check_change(guard, "open for writing", _real_parent(name), source=False)


def _check_change(guard: Guard, event: str, path: str, *, source: bool) -> None:
    """``path``: the real path the operation changes (``source``: a hard link's target)."""
    if guard.project and _inside(path, guard.project):
        _refuse(guard, "project", f"{event} of {path!r}")
    if source:
        return  # a hard link of a file outside the project changes nothing there
    if _inside_any(path, guard.hidden):
        _refuse(guard, "verifier", f"{event} of {path!r}")
    if not _inside_any(path, guard.writable) and not path.startswith("/dev/"):
        _refuse(guard, "outside", f"{event} of {path!r}")


def _check_connect(guard: Guard, address: Any) -> None:
    if not isinstance(address, (str, bytes)) or not address:
        return  # an IP address, or an abstract Unix socket (a bytes or str with a NUL)
    name = os.fsdecode(address)
    if name.startswith("\0"):
        return
    real = os.path.realpath(name)  # connect() follows links (a mirrored socket's too)
    if real != os.path.realpath(guard.own_socket) and _inside_any(real, guard.hidden):
        _refuse(guard, "verifier", f"connection to {name!r}")


def make_writable_here(path: Any, root: str, *, keep: bool = True) -> None:
    """Before writing ``path``: a link of the mirror into the project (``root``, a real
    path) becomes a private file (a copy of the project's when ``keep``)."""
    name = os.fsdecode(os.fspath(path))
    if os.path.islink(name) and _inside(os.path.realpath(name), root):
        original = os.path.realpath(name)
        os.unlink(name)
        if keep and os.path.isfile(original):
            shutil.copyfile(original, name)


def _wrap_os_open(guard: Guard, original: Any) -> Any:
    """``os.open(..., dir_fd=fd)``: its audit event has no ``dir_fd``, so the path is
    resolved here and opened by its full name."""

    @functools.wraps(original)
    def guarded_open(path: Any, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        if dir_fd is not None and _is_path(path):
            full = _resolve(path, dir_fd, follow=True)
            if full is not None:
                return int(original(full, flags, mode))
        return int(original(path, flags, mode, dir_fd=dir_fd))

    return guarded_open


def _wrap_torch_save(guard: Guard) -> None:
    torch = sys.modules.get("torch")
    if torch is None:
        return
    original = getattr(torch, "save")  # noqa: B009 - an untyped module

    @functools.wraps(original)
    def save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> Any:
        if _is_path(f):
            _check_open(guard, f, "wb", None)
        return original(obj, f, *args, **kwargs)

    setattr(torch, "save", save)  # noqa: B010 - a module looked up in sys.modules


def _resolve(path: Any, dir_fd: Any, *, follow: bool) -> str | None:
    """The real path an operation on ``path`` (relative to ``dir_fd``) acts on."""
    if isinstance(path, int):
        try:
            return os.readlink(f"/proc/self/fd/{path}")
        except OSError:
            return None
    if not _is_path(path):
        return None
    name = os.fsdecode(os.fspath(path))
    if not os.path.isabs(name) and isinstance(dir_fd, int) and dir_fd >= 0:
        try:
            name = os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), name)
        except OSError:
            return None
    name = os.path.abspath(name)
    return os.path.realpath(name) if follow else _real_parent(name)


def _real_parent(name: str) -> str:
    """``name`` with its directory resolved, its last part kept (a link stays a link)."""
    return os.path.join(os.path.realpath(os.path.dirname(name)), os.path.basename(name))


def _short(args: tuple[Any, ...]) -> str:
    return repr(args[0] if args else "")[:120]


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _inside_any(path: str, roots: tuple[str, ...]) -> bool:
    return any(_inside(path, root) for root in roots)


def _is_path(value: Any) -> bool:
    return isinstance(value, (str, bytes, os.PathLike))


def _writes(mode: Any, flags: Any) -> bool:
    if isinstance(mode, str):
        return any(c in mode for c in "wax+")
    return isinstance(flags, int) and bool(flags & _WRITE_FLAGS)


def _keeps_content(mode: Any, flags: Any) -> bool:
    """Appending or updating in place needs the old content; ``w`` truncates anyway."""
    if isinstance(mode, str):
        return "a" in mode or "+" in mode and "w" not in mode
    return isinstance(flags, int) and not flags & os.O_TRUNC
