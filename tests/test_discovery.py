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
    code, out, _ = invoke("fix", "--write", "--no-verify", str(tmp_path / "gen.py"))
    assert (tmp_path / "gen.py").read_text(encoding="utf-8").endswith(BUGGY)


def test_a_file_that_kills_its_worker_is_reported_and_the_batch_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import multiprocessing
    import os

    import gradfix.runner
    from gradfix.registry import select_rules
    from gradfix.runner import RunOptions, process_paths

    if multiprocessing.get_start_method() != "fork":
        pytest.skip("the crashing stand-in reaches workers only by fork")
    for i in range(20):
        (tmp_path / f"f{i:02}.py").write_text(BUGGY, encoding="utf-8")
    real, parent = gradfix.runner.process_file, os.getpid()

    def crashing(path, options):  # type: ignore[no-untyped-def]
        if path.endswith("f07.py"):
            if os.getpid() == parent:  # never kill the test run itself
                raise AssertionError("f07.py was processed outside a worker")
            os._exit(3)  # what a segfault in native code looks like to the pool
        return real(path, options)

    # pickled by name into the (forked) workers: it must be found as process_file
    crashing.__module__, crashing.__qualname__ = "gradfix.runner", "process_file"
    monkeypatch.setattr(gradfix.runner, "process_file", crashing)
    run = process_paths([str(tmp_path)], RunOptions(rules=select_rules()), jobs=2)
    errors = {os.path.basename(r.path): r.error for r in run.files if r.error}
    assert errors == {"f07.py": "crashed the worker process (skipped; the batch goes on)"}
    assert sum(1 for r in run.files if r.findings) == 19


def test_progress_bar_only_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from gradfix.cli.common import progress_bar

    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False, raising=False)
    with progress_bar() as progress:
        assert progress is None
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    with progress_bar() as progress:
        assert progress is not None
        advance = progress(60)
        for _ in range(60):
            advance()
    monkeypatch.setenv("CI", "true")
    with progress_bar() as progress:
        assert progress is None


def test_no_git_process_outside_a_repository(
    tmp_path_factory: pytest.TempPathFactory, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No ``.git`` from a file's folder up to the filesystem's root: nothing is ignored and
    git is not started (a run over an unpacked wheel); ``GIT_DIR`` or a ``.git`` asks it."""
    import gradfix.fileio.gitfiles as gitfiles

    outside = tmp_path_factory.mktemp("outside") / "a.py"  # beside the repository
    if any((parent / ".git").exists() for parent in outside.parents):
        pytest.skip("the temporary directory lies in a git repository")
    asked: list[str] = []
    real = gitfiles._git

    def recording(args, cwd, stdin=None):  # type: ignore[no-untyped-def]
        asked.append(cwd)
        return real(args, cwd, stdin)

    monkeypatch.setattr(gitfiles, "_git", recording)
    monkeypatch.setattr(gitfiles, "_ROOTS", {})
    outside.write_text("x = 1\n")
    assert gitfiles.ignored_paths([str(outside)]) == set() and asked == []
    monkeypatch.setattr(gitfiles, "_ROOTS", {})
    monkeypatch.setenv("GIT_DIR", str(repo / ".git"))
    gitfiles.ignored_paths([str(outside)])
    assert asked  # GIT_DIR names a repository wherever the files are
    monkeypatch.delenv("GIT_DIR")
    monkeypatch.setattr(gitfiles, "_ROOTS", {})
    asked.clear()
    ignored = str(repo / "out" / "gen.py")  # the repository's .gitignore has out/
    assert gitfiles.ignored_paths([ignored, str(repo / "a.py")]) == {ignored} and asked
