"""Unified diffs (gradfix.fileio.diff): headers, patience matching, and diffs that apply."""

from __future__ import annotations

import difflib
import re
import shutil
import subprocess
from pathlib import Path

import patiencediff
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gradfix.fileio.diff import file_diff, unified_diff
from gradfix.fileio.text import split_lines

BEFORE = """import torch
a = torch.nn.Parameter(torch.rand(5))
a0 = a[0] * 2
a1 = torch.log(a[1] + 1)
A = torch.tensor([a0, a1])
A.sum().backward()
"""
AFTER = BEFORE.replace("torch.tensor([a0, a1])", "torch.stack([a0, a1])")


def test_headers_and_hunk() -> None:
    assert unified_diff(BEFORE, AFTER, "pkg/model.py") == (
        "--- a/pkg/model.py\n"
        "+++ b/pkg/model.py\n"
        "@@ -2,5 +2,5 @@\n"
        " a = torch.nn.Parameter(torch.rand(5))\n"
        " a0 = a[0] * 2\n"
        " a1 = torch.log(a[1] + 1)\n"
        "-A = torch.tensor([a0, a1])\n"
        "+A = torch.stack([a0, a1])\n"
        " A.sum().backward()\n"
    )


def test_equal_texts_give_no_diff() -> None:
    assert unified_diff(BEFORE, BEFORE, "m.py") == ""


def test_uses_the_patience_algorithm() -> None:
    # Patience only anchors on lines unique on both sides; difflib matches `x = 1` here.
    before, after = ")\nx = 1\nx = 1\n", "z = f(\nx = 1\n\n"
    body = unified_diff(before, after, "m.py").split("\n", 2)[2]
    assert body == "@@ -1,3 +1,3 @@\n-)\n-x = 1\n-x = 1\n+z = f(\n+x = 1\n+\n"
    expected = patiencediff.unified_diff(
        split_lines(before),
        split_lines(after),
        sequencematcher=patiencediff.PatienceSequenceMatcher,
    )
    assert body == "".join(list(expected)[2:])
    assert body != "".join(list(difflib.unified_diff(split_lines(before), split_lines(after)))[2:])


def test_missing_final_newline_is_marked() -> None:
    diff = unified_diff("a = 1\nb = 2", "a = 1\nb = 3", "m.py")
    assert diff.endswith(
        "-b = 2\n\\ No newline at end of file\n+b = 3\n\\ No newline at end of file\n"
    )


def test_crlf_lines_keep_their_endings() -> None:
    diff = unified_diff("a = 1\r\nb = 2\r\n", "a = 1\r\nb = 3\r\n", "m.py")
    assert "\n-b = 2\r\n+b = 3\r\n" in diff
    assert diff.startswith("--- a/m.py\n+++ b/m.py\n@@ -1,2 +1,2 @@\n")


def test_lines_split_on_newline_only() -> None:
    text = "s = 'form\x0cfeed'  # \u2028 stays\r\nt = 1"
    assert split_lines(text) == ["s = 'form\x0cfeed'  # \u2028 stays\r\n", "t = 1"]
    assert split_lines("") == []


def test_empty_ranges_name_the_line_before() -> None:
    assert "@@ -0,0 +1 @@\n+a\n" in unified_diff("", "a\n", "m.py")
    assert "@@ -1 +0,0 @@\n-a\n" in unified_diff("a\n", "", "m.py")


def test_file_diff_is_encoded_like_the_file_with_its_bom() -> None:
    latin = file_diff("s = 'é'\n", "s = 'è'\n", "m.py", "iso-8859-1")
    assert latin.endswith(b"-s = '\xe9'\n+s = '\xe8'\n")
    bom = file_diff("a = 1\n", "b = 1\n", "m.py", "utf-8-sig")
    assert bom.endswith(b"-\xef\xbb\xbfa = 1\n+\xef\xbb\xbfb = 1\n")


# --- the diffs apply -------------------------------------------------------------------------


def apply_unified_diff(text: str, diff: str) -> str:
    """A strict applier: context and removed lines must match exactly."""
    old = split_lines(text)
    out: list[str] = []
    position = 0
    lines = split_lines(diff)[2:]
    index = 0
    while index < len(lines):
        header = re.match(r"@@ -(\d+)(?:,(\d+))? \+\d+(?:,\d+)? @@\n", lines[index])
        assert header, lines[index]
        start, count = int(header[1]), int(header[2] or 1)
        hunk_start = start - 1 if count else start
        out += old[position:hunk_start]
        position = hunk_start
        index += 1
        while index < len(lines) and not lines[index].startswith("@@"):
            tag, line = lines[index][0], lines[index][1:]
            index += 1
            if index < len(lines) and lines[index].startswith("\\ No newline"):
                line = line[:-1]
                index += 1
            if tag in " -":
                assert old[position] == line
                position += 1
            if tag in " +":
                out.append(line)
    return "".join(out + old[position:])


LINES = st.sampled_from(["a = 1", "b = 2", "", "return x", "    pass", "# c", "x = (", ")"])


@st.composite
def sources(draw: st.DrawFn) -> str:
    lines = draw(st.lists(LINES, max_size=12))
    newline = draw(st.sampled_from(["\n", "\r\n"]))
    text = newline.join(lines)
    return text + newline if lines and draw(st.booleans()) else text


@settings(max_examples=300, deadline=None)
@given(sources(), sources(), st.integers(min_value=0, max_value=3))
def test_diff_applies_back(before: str, after: str, context: int) -> None:
    diff = unified_diff(before, after, "m.py", context=context)
    assert apply_unified_diff(before, diff) == after


@pytest.mark.skipif(shutil.which("patch") is None, reason="needs GNU patch")
@pytest.mark.parametrize(
    ("before", "after", "encoding"),
    [
        (BEFORE, AFTER, "utf-8"),
        (BEFORE.replace("\n", "\r\n"), AFTER.replace("\n", "\r\n"), "utf-8"),
        (BEFORE.rstrip("\n"), AFTER.rstrip("\n"), "utf-8"),
        (
            "# coding: latin-1\ns = 'é'\n" + BEFORE,
            "# coding: latin-1\ns = 'é'\n" + AFTER,
            "iso-8859-1",
        ),
        (BEFORE, "import os\n" + AFTER, "utf-8-sig"),
    ],
)
def test_patch_applies_the_diff(tmp_path: Path, before: str, after: str, encoding: str) -> None:
    target = tmp_path / "pkg" / "model.py"
    target.parent.mkdir()
    bom = "\ufeff" if encoding == "utf-8-sig" else ""
    plain = "utf-8" if encoding == "utf-8-sig" else encoding
    target.write_bytes((bom + before).encode(plain))
    diff = file_diff(before, after, "pkg/model.py", encoding)
    subprocess.run(
        ["patch", "-p1", "--batch", "--no-backup-if-mismatch"],
        input=diff,
        cwd=tmp_path,
        check=True,
        capture_output=True,
    )
    assert target.read_bytes() == (bom + after).encode(plain)
