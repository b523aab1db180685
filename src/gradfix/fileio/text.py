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


def keep_line_endings(original: str, fixed: str) -> str:
    """``fixed`` with each line that comes from ``original`` ending as it did there.

    LibCST prints the lines it builds with the file's first line break and drops a final
    ``\\r`` (``"a\\rb\\r"`` prints as ``"a\\rb"``). The lines of the two texts are matched
    by a patience diff; in a changed region, by their text without indentation (a
    statement wrapped in a block moves right), else one for one when the region keeps
    its number of lines. A matched line takes its original ending; a new line keeps the
    one LibCST gave it (the file's first). Only a last line is left without a break.

        keep_line_endings("a\\rb\\n", "a\\nc\\nb\\n") == "a\\rc\\nb\\n"
    """
    if "\r" not in original or original == fixed:
        return fixed  # ``\n`` only: LibCST prints every ending as it was
    breaks = set(LINE_BREAK.findall(original))
    if len(breaks) == 1:
        (ending,) = breaks
        if original.endswith(ending) and not fixed.endswith(("\r", "\n")):
            return fixed + ending
        return fixed
    return _matched_line_endings(original, fixed)


def _matched_line_endings(original: str, fixed: str) -> str:
    import patiencediff

    old, new = LINE.findall(original), LINE.findall(fixed)
    old_text = [_without_ending(line) for line in old]
    new_text = [_without_ending(line) for line in new]
    endings = [line[len(text) :] for line, text in zip(new, new_text)]
    matcher = patiencediff.PatienceSequenceMatcher(None, old_text, new_text)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            pairs = list(zip(range(i1, i2), range(j1, j2)))
        elif tag == "replace":
            pairs = _changed_region(old_text, new_text, range(i1, i2), range(j1, j2))
        else:
            continue
        for i, j in pairs:
            ending = old[i][len(old_text[i]) :]
            if ending or j == len(new) - 1:
                endings[j] = ending
    return "".join(text + ending for text, ending in zip(new_text, endings))


def _changed_region(
    old_text: list[str], new_text: list[str], olds: range, news: range
) -> list[tuple[int, int]]:
    """Which old line each new line of a changed region stands for: the same text without
    indentation, in order; one for one when nothing matches that way and the region
    keeps its length."""
    import bisect

    where: dict[str, list[int]] = {}
    for i in olds:
        where.setdefault(old_text[i].strip(), []).append(i)
    pairs, start = [], olds.start
    for j in news:
        candidates = where.get(new_text[j].strip(), [])
        found = bisect.bisect_left(candidates, start)
        if found < len(candidates):
            pairs.append((candidates[found], j))
            start = candidates[found] + 1
    if not pairs and len(olds) == len(news):
        pairs = list(zip(olds, news))
    return pairs


def _without_ending(line: str) -> str:
    return line.rstrip("\r\n")
