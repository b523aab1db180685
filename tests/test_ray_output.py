"""``--executor ray`` keeps stdout for gradfix's report: Ray's own messages about the
cluster (``(raylet) A worker died ...``) go to stderr. A subprocess: it starts its own Ray."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ray")

BUGGY = "import torch\nw = torch.randn(3, requires_grad=True)\nw.normal_()\n"

#: A worker dies under a RayExecutor; the script waits (at most a minute) until Ray's
#: driver has printed its message about it, on either stream, then says where it went.
WORKER_DIES = """
import os, sys, time
from gradfix.ray_executor import RayExecutor

class Watch:
    def __init__(self, stream):
        self.stream, self.raylet = stream, False
    def write(self, text):
        self.raylet = self.raylet or "(raylet)" in text
        return self.stream.write(text)
    def __getattr__(self, name):
        return getattr(self.stream, name)

sys.stdout, sys.stderr = Watch(sys.stdout), Watch(sys.stderr)
with RayExecutor(num_cpus=1) as executor:
    @executor.ray.remote(max_retries=0)
    def die():
        os._exit(1)
    try:
        executor.ray.get(die.remote())
    except Exception:
        pass
    deadline = time.monotonic() + 60
    while not (sys.stdout.raylet or sys.stderr.raylet) and time.monotonic() < deadline:
        time.sleep(0.2)
print("REPORT")
"""


def test_ray_messages_about_the_cluster_go_to_stderr() -> None:
    done = subprocess.run(
        [sys.executable, "-c", WORKER_DIES],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "(raylet)" in done.stderr and "A worker died" in done.stderr
    assert done.stdout == "REPORT\n"


def test_a_cluster_that_fails_is_started_again_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The cluster itself fails (its raylet died: every ``ray.get`` raises until Ray is
    started again): the Ray the run started is started again once and every file gets
    the result it gets locally, none the error of a crashed worker."""
    import ray

    from gradfix import ray_executor
    from gradfix.ray_executor import RayExecutor
    from gradfix.registry import select_rules
    from gradfix.runner import RunOptions, process_paths

    monkeypatch.setattr(ray_executor, "BATCH_FILES", 2)
    for number in range(8):
        (tmp_path / f"m{number}.py").write_text(BUGGY, encoding="utf-8")
    options = RunOptions(rules=select_rules(), fix=True)
    local = process_paths([str(tmp_path)], options)
    state = {"batches": 0, "dead": False, "inits": 0}
    real_get, real_init = ray.get, ray.init

    def get(refs, *args, **kwargs):  # type: ignore[no-untyped-def]
        if not isinstance(refs, list):  # a batch's results (the warm-up asks for a list)
            state["batches"] += 1
            state["dead"] = state["dead"] or state["batches"] == 2
        if state["dead"]:
            raise ray.exceptions.LocalRayletDiedError()
        return real_get(refs, *args, **kwargs)

    def init(*args, **kwargs):  # type: ignore[no-untyped-def]
        state["inits"] += 1
        state["dead"] = False
        return real_init(*args, **kwargs)

    monkeypatch.setattr(ray, "get", get)
    monkeypatch.setattr(ray, "init", init)
    with RayExecutor(num_cpus=1) as executor:
        on_ray = process_paths([str(tmp_path)], options, executor=executor)
    assert state["inits"] == 2
    assert [(r.path, r.fixed, r.error) for r in on_ray.files] == [
        (r.path, r.fixed, r.error) for r in local.files
    ]
    assert "the Ray cluster failed" in capsys.readouterr().err


def test_a_cluster_that_fails_twice_ends_the_run_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Dead after the restart too: one line and exit 2, nothing written."""
    import ray
    from typer.testing import CliRunner

    from gradfix.cli import app

    (tmp_path / "m.py").write_text(BUGGY, encoding="utf-8")
    state = {"batches": 0}
    real_get = ray.get

    def get(refs, *args, **kwargs):  # type: ignore[no-untyped-def]
        if not isinstance(refs, list):  # a batch's results (the warm-up asks for a list)
            state["batches"] += 1
        if state["batches"]:
            raise ray.exceptions.LocalRayletDiedError()
        return real_get(refs, *args, **kwargs)

    monkeypatch.setattr(ray, "get", get)
    monkeypatch.setenv("RAY_ADDRESS", "")
    result = CliRunner().invoke(
        app, ["fix", "--write", "--no-verify", "--executor", "ray", str(tmp_path / "m.py")]
    )
    assert result.exit_code == 2
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and lines[0].startswith("error: the Ray cluster failed during the run")
    assert "Traceback" not in result.stderr
    assert (tmp_path / "m.py").read_text(encoding="utf-8") == BUGGY
