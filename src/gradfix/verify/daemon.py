"""The warm verifier's server side: ``python -m gradfix.verify.runner --fork-daemon ADDRESS IDLE``.

It imports torch once, then forks a runner (:func:`gradfix.verify.runner.serve`) per
request on the Unix socket ``ADDRESS`` (one JSON line in, ``{"pid", "stdout", "stderr"}``
out) and exits after ``IDLE`` seconds without one (see
:class:`gradfix.verify.process.SharedForkServer`, the client). A request is served only
when

- the peer (``SO_PEERCRED``) is a process of the same user, in the daemon's own user
  namespace (a runner in the OS sandbox is not), and not one of the daemon's own runners
  or their children;
- it carries the daemon's secret: 32 random bytes written at start-up next to the socket
  (``ADDRESS.key``, mode 0600, in the private directory every runner has hidden), that a
  forked runner wipes from its memory before the script runs.

The daemon chooses the runner's output files itself (``runner-<random>.stdout`` /
``.stderr`` in its private directory, created anew): a request cannot name them.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import os
import secrets
import signal
import socket
import struct
from typing import Any

#: the longest request line read (a spec holds the environment and a few paths)
MAX_REQUEST = 1 << 20


def secret_path(address: str) -> str:
    return f"{address}.key"


def write_secret(address: str) -> bytearray:
    """A fresh secret, written where only this user reads it (replaced atomically)."""
    secret = bytearray(secrets.token_bytes(32))
    path = secret_path(address)
    temporary = f"{path}.{os.getpid()}"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, secret.hex().encode("ascii"))
    finally:
        os.close(fd)
    os.replace(temporary, path)
    return secret


def fork_daemon(address: str, idle: float) -> int:
    """Serve requests on ``address`` until idle (see the module docstring)."""
    from gradfix.verify import guard, namespaces  # noqa: F401 - imported once, here
    from gradfix.verify.runner import _import_torch

    _import_torch()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    if os.path.exists(address):
        os.unlink(address)  # a dead server's (the caller holds the start lock)
    # the short socket directory a server that went idle may just have removed
    os.makedirs(os.path.dirname(address) or ".", mode=0o700, exist_ok=True)
    listener.bind(address)
    os.chmod(address, 0o600)
    inode = os.stat(address).st_ino
    secret = write_secret(address)
    outputs: list[str] = []
    listener.listen(16)
    listener.settimeout(idle)
    while True:
        try:
            conn, _ = listener.accept()
        except socket.timeout:
            break
        with conn:
            if not _serve_request(conn, listener, secret, outputs):
                break
    with contextlib.suppress(OSError):
        if os.stat(address).st_ino == inode:  # not a newer server's socket
            os.unlink(address)
            os.unlink(secret_path(address))
    for path in outputs:
        with contextlib.suppress(OSError):
            os.unlink(path)
    _remove_short_directory(address)
    return 0


def _remove_short_directory(address: str) -> None:
    """The short private directory ``/tmp/gradfix-<uid>-<hash>`` made for a socket whose
    path was too long (see ``process._socket_path``) goes with its server, once empty:
    a temporary directory per test run would otherwise leave one behind each."""
    directory = os.path.dirname(address)
    if os.path.basename(address) != "forkserver.sock":
        return
    if not os.path.basename(directory).startswith(f"gradfix-{os.getuid()}-"):
        return
    with contextlib.suppress(OSError):
        os.rmdir(directory)  # not empty: a newer server's


def _serve_request(
    conn: socket.socket, listener: socket.socket, secret: bytearray, outputs: list[str]
) -> bool:
    """Fork a runner for the request read from ``conn``; False when asked to stop."""
    conn.settimeout(10.0)
    refused = refusal(conn)
    buffer = bytearray()
    try:
        request = _read_request(conn, buffer) if refused is None else None
    except (OSError, ValueError):
        request = None
    if request is not None and not _has_secret(request, secret):
        refused = "the request does not carry the verifier's secret"
    if refused is not None or request is None:
        with contextlib.suppress(OSError):
            conn.sendall(json.dumps({"error": refused or "unreadable request"}).encode() + b"\n")
        return True
    if request.get("stop"):
        return False
    spec = dict(request.get("spec") or {})
    paths = _output_paths(os.path.dirname(os.path.abspath(listener.getsockname())))
    outputs.extend(paths.values())
    spec.update(paths)  # whatever the request said: the daemon's own files
    box = spec.setdefault("sandbox", {})
    box["hide"] = [*box.get("hide", []), os.path.dirname(paths["stdout"])]
    pid = os.fork()
    if pid == 0:
        _forget(secret, buffer, request)
        listener.close()
        conn.close()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        from gradfix.verify.runner import serve

        serve(spec, forked=True)
    with contextlib.suppress(OSError):
        conn.sendall(json.dumps({"pid": pid, **paths}).encode("utf-8") + b"\n")
    return True


def refusal(conn: socket.socket) -> str | None:
    """Why the peer of ``conn`` may not ask for a runner, or None."""
    size = struct.calcsize("3i")
    pid, uid, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, size))
    if uid != os.getuid():
        return "the peer is another user"
    if _namespace(pid) != _namespace(os.getpid()):
        return "the peer runs in a sandbox"
    if _descends_from(pid, os.getpid()):
        return "the peer is a process of a verification run"
    return None


def _namespace(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/user")
    except OSError:
        return None


def _descends_from(pid: int, ancestor: int) -> bool:
    for _ in range(64):
        if pid == ancestor:
            return True
        if pid <= 1:
            return False
        try:
            with open(f"/proc/{pid}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            return False
        pid = int(fields[1])
    return False


def _read_request(conn: socket.socket, buffer: bytearray) -> dict[str, Any]:
    while b"\n" not in buffer:
        chunk = conn.recv(65536)
        if not chunk or len(buffer) > MAX_REQUEST:
            raise ValueError("no complete request")
        buffer += chunk
    request = json.loads(bytes(buffer).split(b"\n", 1)[0])
    if not isinstance(request, dict):
        raise ValueError("not an object")
    return request


def _has_secret(request: dict[str, Any], secret: bytearray) -> bool:
    given = request.pop("secret", None)
    if not isinstance(given, str):
        return False
    return hmac.compare_digest(given.encode("ascii", "replace"), secret.hex().encode("ascii"))


def _output_paths(directory: str) -> dict[str, str]:
    """Two new files of the daemon's own (never an existing file: ``O_EXCL``)."""
    token = secrets.token_hex(8)
    paths = {
        name: os.path.join(directory, f"runner-{token}.{name}") for name in ("stdout", "stderr")
    }
    for path in paths.values():
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
    return paths


def _forget(secret: bytearray, buffer: bytearray, request: dict[str, Any]) -> None:
    """The forked runner wipes the secret from its memory before it runs any script."""
    secret[:] = bytes(len(secret))
    buffer[:] = bytes(len(buffer))
    request.clear()
