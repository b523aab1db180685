"""The warm shared verifier: started by the first ``gradfix`` run, reused by the next ones,
gone when idle or asked to stop (``gradfix.verify.process.SharedForkServer``)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")
if not sys.platform.startswith("linux"):
    pytest.skip("the shared verifier forks (Linux only)", allow_module_level=True)

SCRIPT = """import os
import torch

w = torch.randn(3, requires_grad=True)
a = torch.tensor([w[0] * 2, w[1]])
(a.sum() + w.sum() * float(os.environ["SCALE"])).backward()
"""


def gradfix(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = dict(os.environ, XDG_RUNTIME_DIR=str(tmp_path / "run"), GRADFIX_NO_CACHE="1")
    environ.update(GRADFIX_VERIFY_DAEMON="1", **env)
    command = [sys.executable, "-m", "gradfix", *args]
    return subprocess.run(command, capture_output=True, text=True, env=environ, timeout=300)


def sockets(tmp_path: Path) -> list[Path]:
    """The sockets of the servers started under ``tmp_path/run`` (where a deep runtime
    directory puts them: see ``_socket_path``)."""
    from gradfix.verify.process import _socket_path, daemon_key

    directory = tmp_path / "run" / "gradfix"
    address = Path(_socket_path(str(directory), f"forkserver-{daemon_key()}.sock"))
    return sorted(address.parent.glob("forkserver*.sock"))


def test_a_second_run_reuses_the_warm_server_with_its_own_environment(tmp_path: Path) -> None:
    (tmp_path / "run").mkdir(mode=0o700)
    script = tmp_path / "train.py"
    script.write_text(SCRIPT, encoding="utf-8")
    first = gradfix(tmp_path, "verify", str(script), SCALE="1")
    assert first.returncode == 0, first.stdout + first.stderr
    [server] = sockets(tmp_path)
    started = server.stat().st_ino
    # the runner forked by the server sees this run's environment, not the first one's
    second = gradfix(tmp_path, "verify", str(script), SCALE="not a number")
    assert "ValueError" in second.stdout, second.stdout + second.stderr
    assert [s.stat().st_ino for s in sockets(tmp_path)] == [started]  # the same server
    from gradfix.verify import process

    environ = dict(os.environ, XDG_RUNTIME_DIR=str(tmp_path / "run"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "environ", environ)
        assert process.shutdown_shared_server()
    deadline = time.monotonic() + 30
    while server.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not server.exists()


def test_an_idle_server_exits_by_itself(tmp_path: Path) -> None:
    (tmp_path / "run").mkdir(mode=0o700)
    script = tmp_path / "train.py"
    script.write_text(SCRIPT, encoding="utf-8")
    result = gradfix(tmp_path, "verify", str(script), SCALE="1", GRADFIX_VERIFY_DAEMON_IDLE="1")
    assert result.returncode == 0, result.stdout + result.stderr
    [server] = sockets(tmp_path)  # (asking makes the directory: not asked again)
    deadline = time.monotonic() + 30
    while server.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not server.exists()
    if server.parent.name.startswith(f"gradfix-{os.getuid()}-"):
        # the short directory a deep runtime directory needed goes with its server
        while server.parent.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not server.parent.exists()


def test_a_deep_runtime_directory_still_gets_a_socket_it_can_bind(tmp_path: Path) -> None:
    """A Unix socket's path is limited to ~108 bytes: a deep XDG_RUNTIME_DIR (a test
    runner's worker directory, a container's) gets a short private directory per
    runtime directory instead of `AF_UNIX path too long`."""
    import socket

    from gradfix.verify.process import SOCKET_PATH_MAX, _socket_path

    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    path = _socket_path(str(deep), "forkserver-" + "k" * 40 + ".sock")
    other = _socket_path(str(deep / "x"), "forkserver-" + "k" * 40 + ".sock")
    assert len(os.fsencode(path)) <= SOCKET_PATH_MAX and path != other
    assert os.stat(os.path.dirname(path)).st_mode & 0o077 == 0
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(path)
    os.unlink(path)
    for made in (path, other):
        os.rmdir(os.path.dirname(made))  # the short directories this test made
    short = _socket_path(str(tmp_path), "s.sock")
    assert short == str(tmp_path / "s.sock")
