"""The last trace's findings kept for the editor (gradfix.trace.remembered): no torch, no run."""

from __future__ import annotations

from pathlib import Path

import pytest

from gradfix.trace.launch import RuntimeFinding
from gradfix.trace.remembered import remember, remembered

SCRIPT = """import torch
w = torch.randn(3, requires_grad=True)
w.add_(1)
x = 1
x = 1
"""


def cache_of(project: Path) -> str:
    return str(project / ".gradfix_cache")


def finding(path: Path, line: int, code: str = "GF201") -> RuntimeFinding:
    return RuntimeFinding(code, "leaf-inplace", str(path), line, f"bug at {line}", 1)


def test_a_finding_stays_on_its_unchanged_line_and_follows_it_when_it_moves(
    tmp_path: Path,
) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    remember([finding(script, 3)], ["python", "train.py"], cache_dir=cache_of(tmp_path))
    (found,) = remembered(str(script), SCRIPT)
    assert (found.line, found.code, found.message, found.step) == (3, "GF201", "bug at 3", 1)
    assert found.command == "python train.py"
    assert [f.line for f in remembered(str(script), "# new\n" + SCRIPT)] == [4]
    assert remembered(str(script), SCRIPT.replace("w.add_(1)", "w = w + 1")) == []
    assert remembered(str(tmp_path / "other.py"), SCRIPT) == []


def test_a_moved_line_whose_text_is_not_unique_is_not_placed(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    remember([finding(script, 4)], ["python", "train.py"], cache_dir=cache_of(tmp_path))
    assert [f.line for f in remembered(str(script), SCRIPT)] == [4]
    assert remembered(str(script), "# new\n" + SCRIPT) == []  # `x = 1` twice: which one?


def test_a_new_run_of_a_command_replaces_what_it_found_and_keeps_the_others(
    tmp_path: Path,
) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    remember([finding(script, 3)], ["python", "train.py"], cache_dir=cache_of(tmp_path))
    remember([finding(script, 2, "GF102")], ["pytest", "tests"], cache_dir=cache_of(tmp_path))
    assert sorted(f.code for f in remembered(str(script), SCRIPT)) == ["GF102", "GF201"]
    remember([], ["python", "train.py"], cache_dir=cache_of(tmp_path))  # fixed: the run is clean
    assert [f.code for f in remembered(str(script), SCRIPT)] == ["GF102"]


def test_the_cache_is_found_from_a_subdirectory_and_a_broken_one_is_ignored(
    tmp_path: Path,
) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    module = package / "model.py"
    module.write_text(SCRIPT)
    remember(
        [finding(Path("pkg/model.py"), 3)],
        ["python", "-m", "pkg"],
        cache_dir=cache_of(tmp_path),
        cwd=str(tmp_path),
    )
    assert [f.line for f in remembered(str(module), SCRIPT)] == [3]
    (entry,) = (tmp_path / ".gradfix_cache").rglob("trace-last-run.json")
    entry.write_text("{not json")
    assert remembered(str(module), SCRIPT) == []


def test_gradfix_trace_remembers_its_findings_for_the_editor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``gradfix trace`` keeps what it found in the project's cache (the LSP shows it);
    ``--no-cache`` keeps nothing."""
    import subprocess
    import sys

    monkeypatch.delenv("GRADFIX_NO_CACHE", raising=False)
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    trace = [sys.executable, "-m", "gradfix", "trace"]
    run = subprocess.run(
        [*trace, "--no-cache", "--", sys.executable, "train.py"], cwd=tmp_path, capture_output=True
    )
    assert run.returncode == 1
    assert remembered(str(script), SCRIPT) == []
    run = subprocess.run(
        [*trace, "--", sys.executable, "train.py"], cwd=tmp_path, capture_output=True
    )
    assert run.returncode == 1
    assert [(f.line, f.code) for f in remembered(str(script), SCRIPT)] == [(3, "GF201")]
