"""``verify --executor ray`` and ``fix --write --executor ray``: each file's fixes proven on
the cluster, in the project shipped to it (its own Ray: the project is shipped when the
run connects)."""

from __future__ import annotations

from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from typer.testing import CliRunner  # noqa: E402

from gradfix import proof, ray_executor  # noqa: E402
from gradfix.cli import app  # noqa: E402

SCRIPT = """\
import os

import torch

here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "data", "scale.txt")) as handle:  # the project's own file
    scale = float(handle.read())
w = torch.randn(3, requires_grad=True) * scale
loss = (w * 2).sum()
loss.backward()
print(loss.item())
"""


def project(root: Path) -> Path:
    (root / "data").mkdir()
    (root / "data" / "scale.txt").write_text("0.5\n")
    (root / "train.py").write_text(SCRIPT)
    return root


def invoke(*args: str):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(app, list(args), catch_exceptions=False)


def test_verify_on_ray_gives_the_local_verdicts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(project(tmp_path))
    local = invoke("verify", ".")
    assert "train.py:8:5: GF103 verified" in local.stdout

    def not_here(*args: object, **kwargs: object) -> None:
        raise AssertionError("verified in the driver, not on the cluster")

    monkeypatch.setattr(proof, "verify_fixes", not_here)
    on_ray = invoke("verify", "--executor", "ray", ".")
    assert (on_ray.exit_code, on_ray.stdout) == (local.exit_code, local.stdout)
    assert not ray.is_initialized()  # the run's own Ray was stopped


def test_fix_write_on_ray_writes_what_the_local_run_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    for name in ("a", "b"):
        project(tmp_path / name)
    monkeypatch.chdir(tmp_path / "a")
    local = invoke("fix", "--write", "--unsafe-fixes", "--no-cache", ".")
    monkeypatch.chdir(tmp_path / "b")
    on_ray = invoke("fix", "--write", "--unsafe-fixes", "--no-cache", "--executor", "ray", ".")
    assert on_ray.exit_code == local.exit_code
    fixed = (tmp_path / "a" / "train.py").read_text()
    assert fixed != SCRIPT and (tmp_path / "b" / "train.py").read_text() == fixed


def test_a_project_too_large_to_ship_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(project(tmp_path))
    monkeypatch.setattr(ray_executor, "MAX_SNAPSHOT_BYTES", 100)
    result = invoke("verify", "--executor", "ray", ".")
    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: ") and "over the 0 MB that can be shipped" in line


TWO_FIXES = """\
import torch

w = torch.ones(3, requires_grad=True) - 0.5
b = torch.zeros(3, requires_grad=True) + 1.0
loss = (w * 2 + b).sum()
loss.backward()
print(loss.item())
"""


class CountedProgress:
    """Stands for the progress bar: the total it was given and each advance."""

    def __init__(self) -> None:
        self.total: int | None = None
        self.advanced = 0

    def __call__(self, label: str = "", minimum: int = 0, **style: object):  # type: ignore[no-untyped-def]
        import contextlib

        @contextlib.contextmanager
        def bar():  # type: ignore[no-untyped-def]
            def start(total: int):  # type: ignore[no-untyped-def]
                self.total = total
                return self.advance

            yield start

        return bar()

    def advance(self) -> None:
        self.advanced += 1


def test_a_command_harness_on_ray_gives_the_local_verdicts_fix_by_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gradfix.cli import verify as verify_command

    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(TWO_FIXES)
    harness = ("--cmd", "python train.py")
    local = invoke("verify", *harness, ".")
    assert local.stdout.count(" verified") == 2, local.stdout
    counted = CountedProgress()
    monkeypatch.setattr(verify_command, "progress_bar", counted)

    def not_again(*args: object, **kwargs: object) -> None:
        raise AssertionError("the driver ran again a change a worker proved")

    monkeypatch.setattr(proof._Prover, "_prove", not_again)  # the fixes together, too
    on_ray = invoke("verify", "--executor", "ray", *harness, ".")
    assert (on_ray.exit_code, on_ray.stdout) == (local.exit_code, local.stdout)
    assert (counted.total, counted.advanced) == (2, 2)  # by fix, not by file
