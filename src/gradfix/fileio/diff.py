"""Unified diffs with the patience algorithm, in the format ``git diff`` and ``patch`` read.

    print(unified_diff(before, after, "model.py"), end="")
    # --- a/model.py
    # +++ b/model.py
    # @@ -2,4 +2,4 @@
    #  a = torch.nn.Parameter(torch.rand(5))
    #  a0 = a[0] * 2
    #  a1 = torch.log(a[1] + 1)
    # -A = torch.tensor([a0, a1])
    # +A = torch.stack([a0, a1])

Lines are split on ``\\n`` only, each keeping its ending, so ``\\r\\n`` files give hunks
with ``\\r\\n`` lines that ``patch`` applies as they are; a last line without a newline
is followed by ``\\ No newline at end of file``. A hunk header may name where its change
is after the ranges, as ``git diff`` names the function (``@@ -54,3 +54,4 @@ cell 4``);
``git apply`` and ``patch`` ignore it.
"""

from __future__ import annotations

from collections.abc import Callable

import patiencediff

from gradfix.fileio.text import split_lines

NO_NEWLINE_MARKER = "\\ No newline at end of file\n"


def unified_diff(
    before: str,
    after: str,
    path: str,
    *,
    context: int = 3,
    section: Callable[[int], str] | None = None,
) -> str:
    """The diff from ``before`` to ``after`` with ``a/path`` / ``b/path`` headers; ``''``
    when the texts are equal. ``section(line)`` names the place of a hunk's first changed
    line of ``before`` (1-based) in its header."""
    if before == after:
        return ""
    old, new = split_lines(before), split_lines(after)
    matcher = patiencediff.PatienceSequenceMatcher(None, old, new)
    name = path.replace("\\", "/")
    out = [f"--- a/{name}\n", f"+++ b/{name}\n"]
    for group in matcher.get_grouped_opcodes(context):
        out.append(_hunk_header(group, section))
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                out.extend(" " + line for line in old[i1:i2])
                continue
            out.extend("-" + line for line in old[i1:i2])
            out.extend("+" + line for line in new[j1:j2])
    return "".join(_mark_missing_newline(line) for line in out)


def _hunk_header(
    group: list[tuple[str, int, int, int, int]], section: Callable[[int], str] | None
) -> str:
    first, last = group[0], group[-1]
    old_range = _format_range(first[1], last[2])
    new_range = _format_range(first[3], last[4])
    name = ""
    if section is not None:
        tag, start = next((op[0], op[1]) for op in group if op[0] != "equal")
        # an insertion's place is the line it follows
        name = section(max(start, 1) if tag == "insert" else start + 1)
    return f"@@ -{old_range} +{new_range} @@{' ' + name if name else ''}\n"


def _format_range(start: int, stop: int) -> str:
    """GNU diff's range: ``3`` for one line, ``3,4``; an empty range names the line before."""
    length = stop - start
    if length == 1:
        return f"{start + 1}"
    return f"{start if length == 0 else start + 1},{length}"


def _mark_missing_newline(line: str) -> str:
    return line if line.endswith("\n") else line + "\n" + NO_NEWLINE_MARKER


def file_diff(before: str, after: str, path: str, encoding: str = "utf-8") -> bytes:
    """:func:`unified_diff` as the bytes ``patch`` applies to the file: encoded like the file
    (``encoding`` from :func:`gradfix.fileio.files.decode_source`), with its BOM on line 1.
    A notebook's is the diff of its JSON text, each hunk header naming its cell
    (:func:`gradfix.notebook.cell_at_line`)."""
    from gradfix.notebook import cell_at_line, is_notebook  # it imports this module

    section = cell_at_line(before) if is_notebook(path) else None
    if encoding == "utf-8-sig":
        before, after, encoding = "\ufeff" + before, "\ufeff" + after, "utf-8"
    diff = unified_diff(before, after, path, section=section)
    return diff.encode(encoding, errors="backslashreplace")
