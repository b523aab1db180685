"""Text utilities shared by diffs, notebooks and the language server."""

from __future__ import annotations

import re


def split_lines(text: str) -> list[str]:
    """Split on ``\\n`` only (``str.splitlines`` also splits on form feeds and U+2028)."""
    lines = text.split("\n")
    last = lines.pop()
    result = [line + "\n" for line in lines]
    if last:
        result.append(last)
    return result


#: a line break as Python, LSP and LibCST count them (not a form feed, not U+2028)
LINE_BREAK = re.compile(r"\r\n|\r|\n")
#: a line with its line break (the last one may have none)
LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")


def source_lines(text: str) -> list[str]:
    """The lines of ``text`` as Python's tokenizer (and ``ast`` positions) count them:
    broken at ``\\r\\n``, ``\\r`` and ``\\n`` only (``str.splitlines`` also breaks at a form
    feed or U+2028, which would shift every line number after it); without their ends."""
    return LINE_BREAK.split(text)
