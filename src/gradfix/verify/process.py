"""Parent side of the oracle: start runners and talk to them. No torch import here.

Every script runs in its own process (``gradfix.verify.runner``), in a fresh temporary
working directory holding the script, with its output going to files there; given the
script's project directory, the working directory mirrors it (:mod:`.sandbox`: the
project's files where the script expects them, and no write into the project). The
parent and the runner exchange JSON lines over a Unix socket that the parent listens on,
so nothing the script prints can corrupt an answer. A runner serves one script: its trace,
then (torch still imported) its finite differences.

Importing torch costs about two seconds per process, more than most scripts take to run. On
Linux the runners are therefore forked from a *fork server*: one long-lived process
(``python -m gradfix.verify.runner --fork-server``, started on first use, with the runner
environment) that imports torch once and forks a fresh, never-used child per script.
That server is *shared* (:class:`SharedForkServer`): it outlives the ``gradfix`` process
that started it and serves every later run of the same user and installation until it
has been idle for 15 minutes, so that a second ``gradfix fix --verify FILE`` pays no torch
import (``GRADFIX_VERIFY_DAEMON=0``: a server of this process only, stopped at its exit).
Elsewhere, or with ``GRADFIX_VERIFY_FORK_SERVER=0``, each runner is a new
``python -m gradfix.verify.runner --child`` subprocess. Both give the same isolation: one
process per script, a new session (process group), the memory cap, the time limit, the
sandbox (:mod:`.sandbox`). The shared server serves only requests carrying its secret
from processes that are not runners, and chooses the runners' output files itself
(:mod:`.daemon`); a runner's parent talks only to the runner it started (``SO_PEERCRED``).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from gradfix.verify.daemon import secret_path
from gradfix.verify.sandbox import (
    mirror_project,
    place_file,
    prepare_job,
    read_report,
    upper_stamp,
)

DEFAULT_MEMORY_LIMIT = 4 << 30
# Where `gradfix` lives (src/ in a source tree, site-packages when installed).
PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])
RUNNER = [sys.executable, "-m", "gradfix.verify.runner"]


class RunnerFailure(Exception):
    """The runner could not answer (``kind``: timeout or crash); the message is one line."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def runner_env() -> dict[str, str]:
    """Environment of the runners: deterministic hashing, no GPU, finds this `gradfix`."""
    env = dict(os.environ)
    paths = [PACKAGE_ROOT] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env.update(
        {
            "PYTHONPATH": os.pathsep.join(dict.fromkeys(paths)),
            "PYTHONHASHSEED": "0",
            "CUDA_VISIBLE_DEVICES": "",
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONIOENCODING": "utf-8",
            "MPLBACKEND": "Agg",
        }
    )
    return env


def use_fork_server() -> bool:
    enabled = os.environ.get("GRADFIX_VERIFY_FORK_SERVER", "1") != "0"
    return enabled and sys.platform.startswith("linux") and hasattr(os, "fork")


def start_server(
    arguments: list[str], log: str | os.PathLike[str], cwd: str, *, piped: bool
) -> subprocess.Popen[bytes]:
    """A runner module process in its own session, stderr to ``log`` (with ``piped``,
    talked to on stdin/stdout)."""
    stream = subprocess.PIPE if piped else subprocess.DEVNULL
    with open(log, "wb") as errors:
        return subprocess.Popen(
            [*RUNNER, *arguments],
            stdin=stream,
            stdout=stream,
            stderr=errors,
            cwd=cwd,
            env=runner_env(),
            start_new_session=True,
        )


class ForkServer:
    """The long-lived process that forks runners (one per parent process, thread-safe)."""

    def __init__(self) -> None:
        self.owner = os.getpid()
        self._home = tempfile.mkdtemp(prefix="gradfix-forkserver-")
        self._log = Path(self._home) / "stderr.txt"
        self._proc = start_server(["--fork-server"], self._log, self._home, piped=True)
        self._lock = threading.Lock()

    def alive(self) -> bool:
        return self.owner == os.getpid() and self._proc.poll() is None

    def spawn(self, spec: dict[str, Any]) -> dict[str, Any]:
        """Fork a runner for ``spec``; returns ``{"pid": ...}``."""
        with self._lock:
            assert self._proc.stdin is not None and self._proc.stdout is not None
            self._proc.stdin.write(json.dumps(spec).encode("utf-8") + b"\n")
            self._proc.stdin.flush()
            line = self._proc.stdout.readline()
        if not line:
            tail = self._log.read_text(encoding="utf-8", errors="replace").strip()
            last = tail.splitlines()[-1] if tail else "no output"
            raise RunnerFailure("crash", f"the verifier's fork server exited: {last[:300]}")
        return {"pid": int(json.loads(line)["pid"])}

    def stop(self) -> None:
        if self.owner != os.getpid():
            return  # a forked copy of the parent: the server belongs to the original
        if self._proc.poll() is None:
            assert self._proc.stdin is not None
            self._proc.stdin.close()  # the server exits on end of input
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(self._proc.pid, signal.SIGKILL)
                self._proc.wait()
        shutil.rmtree(self._home, ignore_errors=True)


class SharedForkServer:
    """The warm verifier: a fork server that outlives the ``gradfix`` process that started
    it, shared by every later ``gradfix fix`` / ``verify`` and the language server of the
    same user, Python and gradfix sources (a Unix socket in a private directory, keyed on
    them), so that only the first run of a session pays torch's import. It exits after
    :data:`DAEMON_IDLE` seconds without a request. Runners it forks take the caller's
    environment from the spec."""

    def __init__(self) -> None:
        self.directory = _private_directory()
        key = daemon_key()
        self.address = _socket_path(self.directory, f"forkserver-{key}.sock")
        self._lock_path = os.path.join(self.directory, f"forkserver-{key}.lock")
        self._log = os.path.join(self.directory, f"forkserver-{key}.log")

    def alive(self) -> bool:
        return True  # each spawn connects anew (and starts the server when it is gone)

    def spawn(self, spec: dict[str, Any]) -> dict[str, Any]:
        """Fork a runner for ``spec`` in the shared server; returns its pid and the output
        files the server chose (``stdout``, ``stderr``)."""
        spec = dict(spec, env=runner_env())
        try:
            return self._ask(spec)
        except (OSError, ValueError):
            self._start()
        try:
            return self._ask(spec)
        except (OSError, ValueError) as error:
            raise RunnerFailure("crash", f"the shared verifier did not answer: {error}") from None

    def _ask(self, spec: dict[str, Any]) -> dict[str, Any]:
        request = {"secret": self._secret(), "spec": spec}
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(30.0)
            conn.connect(self.address)
            conn.sendall(json.dumps(request).encode("utf-8") + b"\n")
            reply = json.loads(conn.makefile("rb").readline())  # ValueError when empty
        if "error" in reply:
            raise RunnerFailure("crash", f"the shared verifier refused: {reply['error']}")
        return {"pid": int(reply["pid"]), "stdout": reply["stdout"], "stderr": reply["stderr"]}

    def _secret(self) -> str:
        """The running server's secret (OSError when there is none: it is started)."""
        with open(secret_path(self.address), encoding="ascii") as key:
            return key.read().strip()

    def _start(self) -> None:
        """Start the server unless another process did meanwhile (one at a time)."""
        import fcntl

        with open(self._lock_path, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if self._accepts():
                return
            arguments = ["--fork-daemon", self.address, _idle_seconds()]
            proc = start_server(arguments, self._log, self.directory, piped=False)
            deadline = time.monotonic() + 120.0
            while not self._accepts():
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RunnerFailure(
                        "crash", f"the shared verifier did not start: {self._tail()}"
                    )
                time.sleep(0.05)
            proc.returncode = 0  # it runs on without us: no "still running" warning

    def _accepts(self) -> bool:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            try:
                probe.connect(self.address)
            except OSError:
                return False
        return True

    def _tail(self) -> str:
        lines = Path(self._log).read_text(encoding="utf-8", errors="replace").splitlines()
        return lines[-1][:300] if lines else "no output"

    def stop(self) -> None:
        pass  # shared: it stops itself when idle (or by shutdown_shared_server)

    def shutdown(self) -> bool:
        """Ask the running server to exit; False when none was running."""
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                conn.settimeout(10.0)
                conn.connect(self.address)
                stop = {"stop": True, "secret": self._secret()}
                conn.sendall(json.dumps(stop).encode("utf-8") + b"\n")
        except OSError:
            return False
        return True


#: Seconds the shared verifier waits for a request before it exits
#: (``GRADFIX_VERIFY_DAEMON_IDLE`` when it starts).
DAEMON_IDLE = 900.0


def _idle_seconds() -> str:
    return os.environ.get("GRADFIX_VERIFY_DAEMON_IDLE", str(DAEMON_IDLE))


def use_shared_server() -> bool:
    """The warm shared verifier (on by default where a fork server can run);
    ``GRADFIX_VERIFY_DAEMON=0``: a fork server of this process only."""
    return use_fork_server() and os.environ.get("GRADFIX_VERIFY_DAEMON", "1") != "0"


def daemon_key() -> str:
    """What a shared server must match: this Python, this gradfix (its verifier's sources,
    by size and modification time) and the import path torch was loaded from."""
    import hashlib

    sources = sorted(Path(__file__).parent.glob("*.py"))
    stamp = [(p.name, p.stat().st_mtime_ns, p.stat().st_size) for p in sources]
    facts = [sys.executable, PACKAGE_ROOT, os.environ.get("PYTHONPATH", ""), stamp]
    return hashlib.sha256(json.dumps(facts).encode("utf-8")).hexdigest()[:16]


def _private_directory_name() -> str:
    base = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
    return os.path.join(
        base, "gradfix" if "XDG_RUNTIME_DIR" in os.environ else f"gradfix-{os.getuid()}"
    )


def _private_directory() -> str:
    """``$XDG_RUNTIME_DIR/gradfix`` or ``<tmp>/gradfix-<uid>``, readable by the user only."""
    directory = _private_directory_name()
    os.makedirs(directory, mode=0o700, exist_ok=True)
    info = os.stat(directory)
    if info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise RunnerFailure("crash", f"{directory} is not private to this user")
    return directory


#: a Unix socket's path must fit ``sockaddr_un`` (108 bytes on Linux, 104 on macOS,
#: with the final NUL)
SOCKET_PATH_MAX = 103


def _socket_path(directory: str, name: str) -> str:
    """``directory/name``, or, where that is too long for a Unix socket (a deep
    ``XDG_RUNTIME_DIR`` or temporary directory), a short private directory under ``/tmp``
    named by a hash of ``directory`` (so each directory still has its own server)."""
    path = os.path.join(directory, name)
    if len(os.fsencode(path)) <= SOCKET_PATH_MAX:
        return path
    import hashlib

    digest = hashlib.sha256(os.fsencode(path)).hexdigest()[:16]
    short = os.path.join("/tmp", f"gradfix-{os.getuid()}-{digest}")
    os.makedirs(short, mode=0o700, exist_ok=True)
    info = os.stat(short)
    if info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise RunnerFailure("crash", f"{short} is not private to this user")
    return os.path.join(short, "forkserver.sock")


_SERVER: ForkServer | SharedForkServer | None = None
_SERVER_LOCK = threading.Lock()


def fork_server() -> ForkServer | SharedForkServer:
    global _SERVER
    with _SERVER_LOCK:
        if _SERVER is None or not _SERVER.alive():
            _SERVER = SharedForkServer() if use_shared_server() else ForkServer()
            atexit.register(_SERVER.stop)
        return _SERVER


def shutdown_shared_server() -> bool:
    """Stop the warm shared verifier of this user and installation (it otherwise exits
    after :data:`DAEMON_IDLE` idle seconds); False when none was running."""
    return SharedForkServer().shutdown()


def shutdown_fork_server() -> None:
    """Stop the fork server now (it is also stopped at interpreter exit)."""
    global _SERVER
    with _SERVER_LOCK:
        if _SERVER is not None:
            _SERVER.stop()
            _SERVER = None


class RunnerProcess:
    """One runner executing one script (use as a context manager)."""

    def __init__(
        self,
        source: str,
        *,
        filename: str = "snippet.py",
        seed: int = 0,
        source_dir: str | None = None,
        memory_limit: int = DEFAULT_MEMORY_LIMIT,
        patched: dict[str, str] | None = None,
    ) -> None:
        self.job_dir = Path(tempfile.mkdtemp(prefix="gradfix-verify-"))
        work = self.job_dir / "work"
        work.mkdir()
        if source_dir is not None:  # the project's files where the script expects them
            mirror_project(source_dir, work)
        script = work / (Path(filename).name or "snippet.py")
        for relative, text in {**(patched or {}), script.name: source}.items():
            place_file(work, relative, text)  # the versions under test, not the project's
        box = prepare_job(self.job_dir, source_dir)
        box["hide"] = verifier_directories()
        self._upper_stamp = upper_stamp(self.job_dir)
        #: which sandbox ran and what the program tried (read when the runner is closed)
        self.sandbox: dict[str, Any] = {"sandbox": None, "attempts": [], "outside": []}
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(str(self.job_dir / "runner.sock"))
        self._server.listen(1)
        self._conn: socket.socket | None = None
        self._buffer = b""
        self._popen: subprocess.Popen[bytes] | None = None
        self._pending = 0
        self._base = {
            "source": source,
            "path": str(script),
            "filename": filename,
            "seed": seed,
            "source_dir": source_dir,
        }
        spec = {
            "socket": str(self.job_dir / "runner.sock"),
            "cwd": str(work),
            "stdout": str(self.job_dir / "stdout.txt"),
            "stderr": str(self.job_dir / "stderr.txt"),
            "memory_limit": memory_limit,
            "project": source_dir,
            "sandbox": box,
        }
        self._stderr = Path(spec["stderr"])
        self._outputs: list[str] = []
        try:
            self.pid = self._launch(spec)
        except BaseException:
            self._server.close()
            shutil.rmtree(self.job_dir, ignore_errors=True)
            raise
        # After the launch: a fork server's start-up (torch import) is not the script's time.
        self.started = time.monotonic()

    def _launch(self, spec: dict[str, Any]) -> int:
        if use_fork_server():
            launched = fork_server().spawn(spec)
            if "stderr" in launched:  # files the shared server chose
                self._outputs = [launched["stdout"], launched["stderr"]]
                self._stderr = Path(launched["stderr"])
            return int(launched["pid"])
        with open(spec["stdout"], "wb") as out, open(spec["stderr"], "wb") as err:
            self._popen = subprocess.Popen(
                [*RUNNER, "--child", json.dumps(spec)],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                cwd=spec["cwd"],
                env=runner_env(),
                start_new_session=True,
            )
        return self._popen.pid

    def __enter__(self) -> RunnerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ protocol
    def send(self, mode: str, *, timeout: float, **fields: Any) -> None:
        """Send a request; the runner ends the process if it runs past ``timeout``."""
        request = dict(self._base, mode=mode, timeout=timeout, **fields)
        conn = self._connection(time.monotonic() + max(timeout, 10.0))
        try:
            conn.sendall(json.dumps(request).encode("utf-8") + b"\n")
            self._pending += 1
        except OSError as exc:
            raise RunnerFailure("crash", self._death_reason()) from exc

    def receive(self, deadline: float) -> dict[str, Any]:
        """The next answer, waiting until ``deadline`` (a ``time.monotonic()`` value)."""
        conn = self._connection(deadline)
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.kill()
                raise RunnerFailure("timeout", "timeout")
            conn.settimeout(min(remaining, 1.0))
            try:
                chunk = conn.recv(1 << 20)
            except socket.timeout:
                continue
            if not chunk:
                if time.monotonic() >= deadline - 1.0:
                    raise RunnerFailure("timeout", "timeout")
                raise RunnerFailure("crash", self._death_reason())
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        self._pending -= 1
        return json.loads(line)

    def _connection(self, deadline: float) -> socket.socket:
        if self._conn is not None:
            return self._conn
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.kill()
                raise RunnerFailure("timeout", "timeout")
            if not self._alive():
                raise RunnerFailure("crash", self._death_reason())
            self._server.settimeout(min(remaining, 0.2))
            try:
                conn, _ = self._server.accept()
            except socket.timeout:
                continue
            if peer_pid(conn) not in (self.pid, -1):  # another process (another run's script)
                conn.close()
                continue
            self._conn = conn
            return conn

    # ------------------------------------------------------------ lifetime
    def _alive(self) -> bool:
        if self._popen is not None:
            return self._popen.poll() is None
        try:
            os.kill(self.pid, 0)  # forked runners are reaped by the fork server
        except (ProcessLookupError, PermissionError):
            return False
        return True

    def _death_reason(self) -> str:
        if self._popen is not None:
            try:
                self._popen.wait(timeout=5)
            except subprocess.TimeoutExpired:
                return "the runner stopped answering"
        tail = self._stderr.read_bytes()[-4000:] if self._stderr.exists() else b""
        lines = [line for line in tail.decode("utf-8", "replace").splitlines() if line.strip()]
        code = self._popen.returncode if self._popen is not None else None
        if code is not None and code < 0 or not lines:
            return "the runner process died (killed by a signal, e.g. the memory cap)"
        return f"the runner process died: {lines[-1].strip()[:300]}"

    def kill(self) -> None:
        """Kill the runner's process group (the runner and anything the script started)."""
        if not self._alive():
            return
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            # A forked runner that has not yet made its own session (process group).
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
        except PermissionError:
            pass
        if self._popen is not None:
            self._popen.wait()

    def close(self) -> None:
        if self._conn is None or self._pending:
            self.kill()  # never connected, or busy with a request nobody waits for
        else:
            try:
                self._conn.sendall(b'{"mode": "exit"}\n')
            except OSError:
                pass
        if self._conn is not None:
            self._conn.close()
        if self._popen is not None:
            try:
                self._popen.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.kill()
        self._server.close()
        self.sandbox = read_report(self.job_dir, self._upper_stamp)
        remove_job(self.job_dir, self._outputs)


def peer_pid(conn: socket.socket) -> int:
    """The process at the other end of a Unix socket (``SO_PEERCRED``; -1 elsewhere)."""
    option = getattr(socket, "SO_PEERCRED", None)
    if option is None:
        return -1
    import struct

    size = struct.calcsize("3i")
    return int(struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, option, size))[0])


def verifier_directories() -> list[str]:
    """Where verifiers of this user keep their sockets, secrets and output files (hidden
    from every runner, as glob patterns): this one's private directory, those of runs with
    or without ``XDG_RUNTIME_DIR``, and the short socket directories under ``/tmp`` (other
    installations' and older versions' servers included)."""
    uid = os.getuid()
    found = [_private_directory_name(), os.path.join(tempfile.gettempdir(), f"gradfix-{uid}*")]
    found.append(os.path.join("/tmp", f"gradfix-{uid}*"))
    return list(dict.fromkeys(found))


def remove_job(job: Path, outputs: list[str]) -> None:
    # the overlay leaves a directory of mode 000 in its work directory
    with contextlib.suppress(OSError):
        os.chmod(job / "overlay-work" / "work", 0o700)
    shutil.rmtree(job, ignore_errors=True)
    for path in outputs:
        with contextlib.suppress(OSError):
            os.unlink(path)
