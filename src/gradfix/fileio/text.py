"""Text utilities shared by diffs, notebooks and the language server."""

from __future__ import annotations


def split_lines(text: str) -> list[str]:
    """Split on ``\\n`` only (``str.splitlines`` also splits on form feeds and U+2028)."""
    lines = text.split("\n")
    last = lines.pop()
    result = [line + "\n" for line in lines]
    if last:
        result.append(last)
    return result
