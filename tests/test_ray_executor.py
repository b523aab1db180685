"""``--executor ray`` (gradfix.ray_executor): the local executor's results, byte for byte,
on a local Ray and on a cluster of simulated nodes; faults lose nothing."""

from __future__ import annotations

import dataclasses
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from crashing_rule import KillsWorker  # noqa: E402

from gradfix import ray_executor  # noqa: E402
from gradfix.ray_executor import RayExecutor  # noqa: E402
from gradfix.registry import select_rules  # noqa: E402
from gradfix.runner import FileResult, RunOptions, process_paths  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TESTS = str(Path(__file__).resolve().parent)
#: the workers import the tests' helper rules
RUNTIME_ENV = {"env_vars": {"PYTHONPATH": os.pathsep.join([TESTS, *sys.path])}}


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, runtime_env=RUNTIME_ENV)
    yield
    ray.shutdown()


def corpus(tmp_path: Path) -> Path:
    """The fixtures and the real-world cases: every rule, fixes, notebooks, bad files."""
    root = tmp_path / "corpus"
    shutil.copytree(ROOT / "fixtures", root / "fixtures")
    shutil.copytree(ROOT / "bench" / "realworld", root / "realworld")
    (root / "broken.py").write_text("import torch\ndef f(:\n", encoding="utf-8")
    (root / "binary.py").write_bytes(b"\x00\xff\xfe import torch")
    return root


def shown(run_files: list[FileResult]) -> list[tuple[object, ...]]:
    return [
        (
            os.path.relpath(r.path),
            [dataclasses.astuple(f) for f in r.findings],
            [dataclasses.astuple(f) for f in r.remaining],
            r.fixed,
            r.error,
            r.skipped,
            r.written,
            r.skipped_cells,
            [(s.source, s.description) for s in r.singles or []],
        )
        for r in run_files
    ]


@pytest.mark.usefixtures("local_ray")
@pytest.mark.parametrize("fix", [False, True])
def test_the_same_results_as_the_local_executor(tmp_path: Path, fix: bool) -> None:
    root = corpus(tmp_path)
    options = RunOptions(rules=select_rules(["ALL"]), fix=fix, unsafe_fixes=fix, singles=not fix)
    local = process_paths([str(root)], options, jobs=2)
    with RayExecutor() as executor:
        on_ray = process_paths([str(root)], options, executor=executor)
    assert len(local.files) > 300
    assert shown(on_ray.files) == shown(local.files)


@pytest.mark.usefixtures("local_ray")
def test_the_driver_writes_the_same_files(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    for name in ("a", "b"):
        shutil.copytree(ROOT / "fixtures", tmp_path / name / "fixtures")
    options = RunOptions(rules=select_rules(), fix=True, write=True, unsafe_fixes=True)
    local = process_paths([str(tmp_path / "a")], options, jobs=2)
    with RayExecutor() as executor:
        on_ray = process_paths([str(tmp_path / "b")], options, executor=executor)
    written = sorted(os.path.relpath(r.path, tmp_path / "a") for r in local.files if r.written)
    assert written and written == sorted(
        os.path.relpath(r.path, tmp_path / "b") for r in on_ray.files if r.written
    )
    for relative in written:
        assert (tmp_path / "a" / relative).read_bytes() == (tmp_path / "b" / relative).read_bytes()


class Counting(RayExecutor):
    """Counts the files sent to the cluster."""

    sent = 0

    def _batches(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        for batch in super()._batches(*args, **kwargs):
            Counting.sent += len(batch.items)
            yield batch


@pytest.mark.usefixtures("local_ray")
def test_cached_results_are_not_sent_again(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "fixtures" / "inplace_on_saved", tmp_path / "src")
    options = RunOptions(rules=select_rules(), cache_dir=str(tmp_path / "cache"))
    with Counting() as executor:
        first = process_paths([str(tmp_path / "src")], options, executor=executor)
        sent = Counting.sent
        again = process_paths([str(tmp_path / "src")], options, executor=executor)
    assert sent > 0 and Counting.sent == sent  # the second run computed nothing
    assert shown(again.files) == shown(first.files)


@pytest.mark.usefixtures("local_ray")
def test_a_file_that_kills_its_worker_is_an_error_and_the_run_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ray_executor, "MAX_RETRIES", 1)
    for number in range(6):
        (tmp_path / f"ok{number}.py").write_text(
            "import torch\nw = torch.randn(3, requires_grad=True)\nw.normal_()\n"
        )
    (tmp_path / "bad.py").write_text("import torch\ntorch.ones(1)  # kill-the-worker\n")
    options = RunOptions(rules=[*select_rules(), KillsWorker])
    with RayExecutor() as executor:
        run = process_paths([str(tmp_path)], options, executor=executor)
    errors = {Path(r.path).name: r.error for r in run.files}
    assert errors.pop("bad.py") == "crashed a Ray worker 2 times (skipped; the run goes on)"
    assert set(errors.values()) == {None}
    assert all([f.code for f in r.findings] == ["GF201"] for r in run.files if r.error is None)


@pytest.mark.usefixtures("local_ray")
def test_ctrl_c_leaves_every_file_whole(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "fixtures", tmp_path / "fixtures")
    before = {p: p.read_bytes() for p in tmp_path.rglob("*.py")}
    options = RunOptions(rules=select_rules(), fix=True, write=True, unsafe_fixes=True)
    ticks = 0

    def tick() -> None:
        nonlocal ticks
        ticks += 1
        if ticks == 20:
            raise KeyboardInterrupt

    paths = sorted(str(p) for p in before)
    with RayExecutor() as executor, pytest.raises(KeyboardInterrupt):
        executor.map(paths, options, tick)
    local = {
        Path(r.path): r
        for r in process_paths(
            [str(ROOT / "fixtures")], dataclasses.replace(options, write=False)
        ).files
    }
    for path, original in before.items():
        now = path.read_bytes()
        if now != original:  # written whole: the complete fixed text
            twin = local[ROOT / path.relative_to(tmp_path)]
            assert now.decode("utf-8") == twin.fixed


def test_without_ray_one_line_and_exit_2(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from gradfix.cli import app

    monkeypatch.setitem(sys.modules, "ray", None)
    (tmp_path / "a.py").write_text("import torch\n")
    result = CliRunner().invoke(app, ["check", "--executor", "ray", str(tmp_path / "a.py")])
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        "error: --executor ray needs Ray: pip install 'gradfix[ray]' (or pip install ray)"
    ]
