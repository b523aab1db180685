"""Batch discovery: .gitignore, --changed-since, @generated files."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gradfix.cli import app

BUGGY = "import torch\nw = torch.randn(3, requires_grad=True)\nw.normal_()\n"


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def git(root: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    git(tmp_path, "init", "-q")
    git(tmp_path, "config", "user.email", "t@example.com")
    git(tmp_path, "config", "user.name", "t")
    for name in ("a.py", "b.py", "out/gen.py"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(BUGGY, encoding="utf-8")
    (tmp_path / ".gitignore").write_text("out/\n", encoding="utf-8")
    git(tmp_path, "add", "-A")
    git(tmp_path, "commit", "-qm", "base")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def files_reported(out: str) -> list[str]:
    return sorted({line.split(":")[0] for line in out.splitlines()})


def test_gitignore_is_honoured_when_walking_but_not_for_named_files(repo: Path) -> None:
    _, out, _ = invoke("check", "--format", "concise", ".")
    assert files_reported(out) == ["a.py", "b.py"]
    _, out, _ = invoke("check", "--format", "concise", "out/gen.py")
    assert files_reported(out) == ["out/gen.py"]


def test_changed_since(repo: Path) -> None:
    (repo / "b.py").write_text(BUGGY + "w.zero_()\n", encoding="utf-8")
    (repo / "new.py").write_text(BUGGY, encoding="utf-8")
    _, out, _ = invoke("check", "--format", "concise", "--changed-since", "HEAD", ".")
    assert files_reported(out) == ["b.py", "new.py"]
    code, _, err = invoke("check", "--changed-since", "no-such-ref", ".")
    assert code == 2 and err.startswith("error: --changed-since no-such-ref:")
    assert err.count("\n") == 1


def test_changed_since_outside_a_repository(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, err = invoke("check", "--changed-since", "HEAD", ".")
    assert code == 2 and "needs a git repository" in err


def test_generated_files_are_skipped(tmp_path: Path) -> None:
    marker = "@" + "generated"
    (tmp_path / "gen.py").write_text(f"# {marker} by protoc\n" + BUGGY, encoding="utf-8")
    (tmp_path / "own.py").write_text(BUGGY, encoding="utf-8")
    code, out, _ = invoke("check", "--format", "concise", str(tmp_path))
    assert files_reported(out) == [str(tmp_path / "own.py")]
    code, out, _ = invoke("fix", "--write", str(tmp_path / "gen.py"))
    assert (tmp_path / "gen.py").read_text(encoding="utf-8").endswith(BUGGY)
