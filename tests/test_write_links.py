"""``fix --write`` and links (issue 33, item 2): a symbolic link is written through only
when its target is in the tree being fixed; a file with other hard links is refused with
one line, never split from them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gradfix.cli import app
from gradfix.fileio.files import FileError, read_source, write_source, write_tree

BUGGY = "import torch\nw = torch.zeros(3, requires_grad=True)\nw.add_(1)\n"
FIXED = (
    "import torch\nw = torch.zeros(3, requires_grad=True)\nwith torch.no_grad():\n    w.add_(1)\n"
)


def fix_write(*paths: str) -> tuple[int, str]:
    args = ["fix", "--write", "--no-verify", "--no-cache", "--select", "GF201", *paths]
    result = CliRunner().invoke(app, args)
    return result.exit_code, result.output


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``proj/`` (the tree fixed) next to ``in/`` (outside it)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "proj" / "special").mkdir(parents=True)
    (tmp_path / "in" / "special").mkdir(parents=True)
    (tmp_path / "in" / "special" / "ok.py").write_text(BUGGY)
    return tmp_path


def test_a_link_out_of_the_tree_is_not_written_through(tree: Path) -> None:
    link = tree / "proj" / "special" / "samefile_link.py"
    link.symlink_to(Path("..", "..", "in", "special", "ok.py"))
    (tree / "proj" / "own.py").write_text(BUGGY)
    target = tree / "in" / "special" / "ok.py"
    inode = target.stat().st_ino
    code, output = fix_write("proj")
    assert code == 2, output
    assert target.read_text() == BUGGY and target.stat().st_ino == inode
    assert link.is_symlink()
    assert (tree / "proj" / "own.py").read_text() == FIXED  # the rest is fixed
    line = next(line for line in output.splitlines() if "samefile_link.py: " in line)
    assert "not written: a symbolic link to" in line
    assert "outside the tree being fixed" in line


def test_a_link_inside_the_tree_is_written_through(tree: Path) -> None:
    (tree / "proj" / "inner.py").write_text(BUGGY)
    link = tree / "proj" / "special" / "inner_link.py"
    link.symlink_to(Path("..", "inner.py"))
    code, output = fix_write("proj/special")  # the link's target is outside what is named
    assert code == 2, output
    assert (tree / "proj" / "inner.py").read_text() == BUGGY
    code, output = fix_write("proj")
    assert code == 0, output
    assert (tree / "proj" / "inner.py").read_text() == FIXED
    assert link.is_symlink() and link.read_text() == FIXED


def test_a_link_named_on_the_command_line_is_written_through(tree: Path) -> None:
    link = tree / "proj" / "named.py"
    link.symlink_to(Path("..", "in", "special", "ok.py"))
    code, output = fix_write("proj/named.py")
    assert code == 0, output
    assert (tree / "in" / "special" / "ok.py").read_text() == FIXED
    assert link.is_symlink()


def test_a_link_to_a_file_of_the_project_is_written_through(tree: Path) -> None:
    (tree / "pyproject.toml").write_text("[tool.gradfix]\n")
    link = tree / "proj" / "special" / "samefile_link.py"
    link.symlink_to(Path("..", "..", "in", "special", "ok.py"))
    code, output = fix_write("proj")
    assert code == 0, output
    assert (tree / "in" / "special" / "ok.py").read_text() == FIXED


def test_hard_links_are_never_split(tree: Path) -> None:
    first, second = tree / "proj" / "a.py", tree / "proj" / "b.py"
    first.write_text(BUGGY)
    os.link(first, second)
    inode = first.stat().st_ino
    code, output = fix_write("proj")
    assert code == 2, output
    assert first.read_text() == second.read_text() == BUGGY
    assert first.stat().st_ino == second.stat().st_ino == inode
    assert "a.py: not written: the file has 1 other hard link" in output
    assert not [p for p in (tree / "proj").iterdir() if "gradfix-tmp" in p.name]


def test_write_source_refuses_before_touching_anything(tmp_path: Path) -> None:
    outside = tmp_path / "outside.py"
    outside.write_text(BUGGY)
    (tmp_path / "tree").mkdir()
    link = tmp_path / "tree" / "link.py"
    link.symlink_to(outside)
    source = read_source(str(link))
    with pytest.raises(FileError, match="outside the tree being fixed"):
        write_source(source, FIXED, tree=write_tree([str(tmp_path / "tree")]))
    assert outside.read_text() == BUGGY
    write_source(source, FIXED, tree=write_tree([str(tmp_path / "tree")], str(tmp_path)))
    assert outside.read_text() == FIXED


def test_add_noqa_does_not_write_through_a_link_out_of_the_tree(tree: Path) -> None:
    link = tree / "proj" / "special" / "samefile_link.py"
    link.symlink_to(Path("..", "..", "in", "special", "ok.py"))
    args = ["check", "--add-noqa", "--no-cache", "--select", "GF201", "proj"]
    result = CliRunner().invoke(app, args)
    assert "outside the tree being fixed" in result.output, result.output
    assert (tree / "in" / "special" / "ok.py").read_text() == BUGGY


def test_a_file_that_will_not_be_written_is_not_run_to_prove_its_fix(tree: Path) -> None:
    first = tree / "proj" / "a.py"
    first.write_text(BUGGY)
    os.link(first, tree / "proj" / "b.py")
    args = ["fix", "--write", "--no-cache", "--select", "GF201", "--timeout", "30", "proj"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "a.py: not written: the file has 1 other hard link" in result.output
    assert "GF201 verified" not in result.output
    assert "GF201 unverified" not in result.output  # no verdict: nothing was run
    assert first.read_text() == BUGGY
