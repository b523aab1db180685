"""Each line keeps its own line ending through a fix (issue 33, item 7): CR-only, CRLF,
LF and mixed files, with and without a final line break, on the lines a fix rewrites and
on the lines it leaves alone."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gradfix.cli import app
from gradfix.engine import lint_source, single_fixes
from gradfix.fileio.text import keep_line_endings
from gradfix.registry import select_rules

#: the file's lines; the fix wraps line 3 (``w.add_(1)``) in ``with torch.no_grad():``
LINES = ["import torch", "w = torch.zeros(3, requires_grad=True)", "w.add_(1)", "x = 1"]
FIXED = ["import torch", "w = torch.zeros(3, requires_grad=True)", "with torch.no_grad():"]
FIXED += ["    w.add_(1)", "x = 1"]

ENDINGS = {
    "cr": ["\r", "\r", "\r", "\r"],
    "crlf": ["\r\n", "\r\n", "\r\n", "\r\n"],
    "lf": ["\n", "\n", "\n", "\n"],
    "cr-no-final": ["\r", "\r", "\r", ""],
    "crlf-no-final": ["\r\n", "\r\n", "\r\n", ""],
    "mixed-final-cr": ["\n", "\r\n", "\n", "\r"],
    "mixed-cr-before-fix": ["\r\n", "\r", "\n", "\r\n"],
    "mixed-fix-own-ending": ["\n", "\n", "\r", "\n"],
    "mixed-no-final": ["\n", "\r\n", "\r", ""],
}


def joined(lines: list[str], endings: list[str]) -> str:
    return "".join(line + ending for line, ending in zip(lines, endings))


def expected(endings: list[str]) -> str:
    """The untouched lines as they were, the wrapped statement too; the new ``with`` line
    takes the file's first line ending."""
    return joined(FIXED, [endings[0], endings[1], endings[0], endings[2], endings[3]])


@pytest.mark.parametrize("kind", sorted(ENDINGS))
def test_fix_keeps_each_line_ending(kind: str) -> None:
    endings = ENDINGS[kind]
    source = joined(LINES, endings)
    result = lint_source(source, rules=select_rules(["GF201"]), fix=True)
    assert result.source == expected(endings)
    (single,) = single_fixes(source, rules=select_rules(["GF201"]))
    assert single.source == expected(endings)


@pytest.mark.parametrize("kind", sorted(ENDINGS))
def test_fix_write_keeps_each_line_ending_on_disk(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    endings = ENDINGS[kind]
    (tmp_path / "m.py").write_bytes(joined(LINES, endings).encode())
    (tmp_path / "clean.py").write_bytes(joined(["import torch", "x = 1"], endings[:2]).encode())
    args = ["fix", "--write", "--no-verify", "--no-cache", "--select", "GF201", "."]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert (tmp_path / "m.py").read_bytes() == expected(endings).encode()
    assert (tmp_path / "clean.py").read_bytes() == joined(
        ["import torch", "x = 1"], endings[:2]
    ).encode()


def test_fixed_last_line_without_line_break_stays_without() -> None:
    source = "import torch\rw = torch.zeros(3, requires_grad=True)\rw.add_(1)"
    result = lint_source(source, rules=select_rules(["GF201"]), fix=True)
    assert result.source == (
        "import torch\rw = torch.zeros(3, requires_grad=True)\rwith torch.no_grad():\r    w.add_(1)"
    )


def test_inserted_lines_keep_what_libcst_gives_them() -> None:
    assert keep_line_endings("a\rb\n", "a\nc\nb\n") == "a\rc\nb\n"
    assert keep_line_endings("a\n", "a\nb\n") == "a\nb\n"


def test_a_line_changed_in_place_keeps_its_ending() -> None:
    assert keep_line_endings("x\r\nw(1)\nb\r\n", "x\r\nw(2)\r\nb\r\n") == "x\r\nw(2)\nb\r\n"


def test_lines_moved_into_a_block_keep_their_own_endings() -> None:
    original = "x\r\nw -= 1\nb -= 1  # bias\r\ny\n"
    fixed = "x\r\nwith g():\r\n    w -= 1\r\n    b -= 1  # bias\r\ny\n"
    assert keep_line_endings(original, fixed) == (
        "x\r\nwith g():\r\n    w -= 1\n    b -= 1  # bias\r\ny\n"
    )


def test_check_frames_a_finding_of_a_cr_only_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m.py").write_bytes(joined(LINES, ENDINGS["mixed-cr-before-fix"]).encode())
    (tmp_path / "cr.py").write_bytes(joined(LINES, ENDINGS["cr"]).encode())
    result = CliRunner().invoke(app, ["check", "--no-cache", "--select", "GF201", "."])
    assert result.exit_code == 1, result.output
    assert result.output.count("3 | w.add_(1)\n") == 2, result.output
