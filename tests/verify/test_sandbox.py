"""Running users' code safely: the hostile script gets nothing through the verifier (with the
OS sandbox where the machine has one, and with the audit-hook fallback alone), a run that
tried is never "verified", and the warm verifier serves only its own callers."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")
if not sys.platform.startswith("linux"):
    pytest.skip("the sandbox and the shared verifier are Linux's", allow_module_level=True)

from gradfix.verify import namespaces, verify_sources  # noqa: E402

BENCH = Path(__file__).resolve().parents[2] / "bench"
spec = importlib.util.spec_from_file_location("bench_safety", BENCH / "safety.py")
assert spec is not None and spec.loader is not None
safety = importlib.util.module_from_spec(spec)
sys.modules.setdefault("bench_safety", safety)  # its dataclasses look their module up
spec.loader.exec_module(safety)

OS_SANDBOX = namespaces.available()


def runtime(tmp_path: Path) -> Path:
    """A private runtime directory: the test's own warm verifier."""
    directory = tmp_path / "run"
    directory.mkdir(mode=0o700)
    return directory


def stop_server(run: Path) -> None:
    from gradfix.verify import process

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "environ", dict(os.environ, XDG_RUNTIME_DIR=str(run)))
        process.shutdown_shared_server()


@pytest.mark.parametrize("sandbox", ["auto", "hooks"])
def test_the_hostile_script_gets_nothing_through_and_is_not_verified(
    tmp_path: Path, sandbox: str
) -> None:
    run_dir = runtime(tmp_path)
    try:
        run = safety.run_hostile("verify", tmp_path, sandbox=sandbox, runtime=run_dir)
    finally:
        stop_server(run_dir)
    assert run.through == [], run.output
    assert run.changed == [], run.output
    assert run.blocked == len(safety.EFFECTS) == 23
    assert run.status == "unverified", run.output
    assert "tried to change what it must not" in run.details["reason"]
    expected = "namespaces" if sandbox == "auto" and OS_SANDBOX else "audit hooks"
    assert run.sandbox == expected, run.details.get("evidence")
    assert run.returncode == 1, run.output


@pytest.mark.parametrize("sandbox", ["auto", "hooks"])
def test_an_honest_script_writing_its_own_files_is_verified_and_names_its_sandbox(
    tmp_path: Path, sandbox: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GRADFIX_SANDBOX", sandbox)
    (tmp_path / "log.txt").write_text("kept\n", encoding="utf-8")
    script = """import tempfile
import torch

with tempfile.NamedTemporaryFile("w", suffix=".txt") as scratch:
    scratch.write("scratch")
open("log.txt", "a").write("appended")
open("new.txt", "w").write("new")
w = torch.randn(3, requires_grad=True)
torch.tensor([w[0] * 2, w[1]]).sum().backward()
"""
    fixed = script.replace("torch.tensor([", "torch.stack([")
    verdict = verify_sources(script, fixed, filename="s.py", source_dir=str(tmp_path), timeout=60)
    assert verdict.status == "verified", verdict.reason
    expected = "namespaces" if sandbox == "auto" and OS_SANDBOX else "audit hooks"
    assert verdict.evidence["sandbox"] == expected
    assert "attempts" not in verdict.evidence
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log.txt"]
    assert (tmp_path / "log.txt").read_text(encoding="utf-8") == "kept\n"


# ------------------------------------------------------------------ the warm verifier
def started_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Path]:
    """A shared verifier of the test's own (its address and private directory)."""
    from gradfix.verify import process

    run = runtime(tmp_path)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(run))
    server = process.SharedForkServer()
    server._start()
    return server.address, Path(server.directory)


def ask(address: str, request: dict[str, object]) -> dict[str, object]:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(30)
        conn.connect(address)
        conn.sendall(json.dumps(request).encode() + b"\n")
        return dict(json.loads(conn.makefile("rb").readline()))


def wait_gone(pid: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)


def test_the_warm_verifier_refuses_a_request_without_its_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    address, _ = started_server(tmp_path, monkeypatch)
    target = tmp_path / "clobbered.txt"
    target.write_text("the user's file\n", encoding="utf-8")
    spec = {"socket": str(tmp_path / "none.sock"), "cwd": str(tmp_path), "memory_limit": 0,
            "project": None, "stdout": str(target), "stderr": str(target)}  # fmt: skip
    try:
        for request in (spec, {"spec": spec}, {"secret": "0" * 64, "spec": spec}):
            reply = ask(address, request)
            assert "pid" not in reply and "secret" in str(reply.get("error")), reply
        time.sleep(0.5)
        assert target.read_text(encoding="utf-8") == "the user's file\n"
    finally:
        stop_server(tmp_path / "run")


def test_the_warm_verifier_chooses_its_runners_output_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gradfix.verify.daemon import secret_path

    address, directory = started_server(tmp_path, monkeypatch)
    target = tmp_path / "named-by-the-request.txt"
    secret = Path(secret_path(address)).read_text(encoding="ascii")
    spec = {"socket": str(tmp_path / "none.sock"), "cwd": str(tmp_path), "memory_limit": 0,
            "project": None, "stdout": str(target), "stderr": str(target)}  # fmt: skip
    try:
        reply = ask(address, {"secret": secret, "spec": spec})
        assert isinstance(reply.get("pid"), int), reply
        wait_gone(int(reply["pid"]))  # it finds no parent socket and exits
        assert not target.exists()
        for name in ("stdout", "stderr"):
            chosen = Path(str(reply[name]))
            assert chosen.parent == Path(address).parent and chosen.name.startswith("runner-")
        assert Path(str(reply["stderr"])).read_text(encoding="utf-8").strip()  # it said why
    finally:
        stop_server(tmp_path / "run")
    assert oct(Path(secret_path(address)).parent.stat().st_mode & 0o777) == oct(0o700)
    del directory


def test_the_warm_verifier_refuses_its_own_runners_and_their_children(tmp_path: Path) -> None:
    """``refusal``: this test process plays the daemon; a child it started asks."""
    from gradfix.verify.daemon import refusal

    address = str(tmp_path / "s.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(address)
    listener.listen(1)
    code = (
        "import socket, time; s = socket.socket(socket.AF_UNIX); "
        f"s.connect({address!r}); time.sleep(5)"
    )
    child = subprocess.Popen([sys.executable, "-c", code])
    try:
        conn, _ = listener.accept()
        with conn:
            assert refusal(conn) == "the peer is a process of a verification run"
    finally:
        child.kill()
        child.wait()
        listener.close()


@pytest.mark.skipif(not OS_SANDBOX, reason="no user namespaces on this machine")
def test_the_warm_verifier_refuses_a_process_in_the_os_sandbox(tmp_path: Path) -> None:
    """``refusal``: a process that entered the runners' namespaces asks (a forked child,
    not a descendant check: it connects from its own namespace)."""
    from gradfix.verify.daemon import refusal

    job = tmp_path / "job"
    for name in ("work", "tmp"):
        (job / name).mkdir(parents=True)
    address = str(tmp_path / "s.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(address)
    listener.listen(1)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            namespaces.enter_namespaces(job, str(job / "work"), None, [])
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                conn.connect(address)
                conn.recv(1)
        finally:
            os._exit(0)
    try:
        listener.settimeout(30)
        conn, _ = listener.accept()
        with conn:
            assert refusal(conn) == "the peer runs in a sandbox"
    finally:
        os.waitpid(pid, 0)
        listener.close()


def test_a_run_that_tried_is_never_verified_and_a_rejected_one_stays_rejected() -> None:
    from gradfix.verify import Verdict
    from gradfix.verify.sandbox import contain

    tried = {"sandbox": "audit hooks", "attempts": ["os.system 'rm x'"] * 3, "outside": []}
    clean = {"sandbox": "audit hooks", "attempts": [], "outside": ["open of '/root/x'"]}
    verified = contain(Verdict("verified", "gradients match"), {"before": tried, "after": clean})
    assert verified.status == "unverified"
    assert "1 attempt(s), the first (before): os.system 'rm x'" in verified.reason
    assert verified.reason.endswith("the comparison alone: gradients match")
    assert verified.evidence["sandbox"] == "audit hooks"
    assert verified.evidence["blocked_outside"] == ["open of '/root/x'"]
    rejected = contain(Verdict("rejected", "gradient lost"), {"before": clean, "after": tried})
    assert rejected.status == "rejected" and rejected.reason.startswith("gradient lost; and ")
    alone = contain(Verdict("verified", "gradients match"), {"before": clean, "after": clean})
    assert (alone.status, alone.reason) == ("verified", "gradients match")


def test_a_runners_parent_talks_only_to_the_runner_it_started(tmp_path: Path) -> None:
    """Another process (another run's script) connecting first to the parent's socket with a
    made-up answer is ignored: the parent waits for its own runner (``SO_PEERCRED``)."""
    from gradfix.verify import process

    class Raced(process.RunnerProcess):
        def _launch(self, spec: dict[str, object]) -> int:
            self.intruder = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.intruder.connect(str(spec["socket"]))  # before the runner even exists
            self.intruder.sendall(b'{"outcome": {"status": "ok"}, "made_up": true}\n')
            return super()._launch(spec)  # type: ignore[arg-type]

    script = "import torch\nw = torch.ones(2, requires_grad=True)\n(w * 3).sum().backward()\n"
    with Raced(script, source_dir=str(tmp_path)) as runner:
        runner.send("trace", timeout=60)
        answer = runner.receive(time.monotonic() + 60)
        runner.intruder.close()
    assert "made_up" not in answer
    assert answer["outcome"] == {"status": "ok"} and answer["event_count"] == 1
