"""Suppression comments: ``# noqa: GF201`` and ``# gradfix: ignore[GF201]``.

A finding is suppressed by a comment on the line it is reported on, or on the first line
of the statement that holds it (the line a multi-line statement starts on). Without codes
(``# noqa``, ``# gradfix: ignore``) every rule is suppressed there, as in ruff/flake8.

    x = torch.tensor([a, b])  # noqa: GF101
    w.normal_()  # gradfix: ignore[GF201, GF205]
"""

from __future__ import annotations

import dataclasses
import io
import re
import tokenize
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gradfix.rule import Report

#: noqa with or without codes (codes separated by commas or spaces)
NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Za-z]+[0-9]+(?:[\s,]+[A-Za-z]+[0-9]+)*))?", re.I)
#: gradfix: ignore, with or without a bracketed list of codes
IGNORE = re.compile(r"#\s*gradfix:\s*ignore(?:\[(?P<codes>[^\]]*)\])?", re.I)
ALL = frozenset({"*"})


def has_suppressions(source: str) -> bool:
    """Cheap test before tokenizing: most files have no suppression comment at all."""
    lowered = source.lower()
    return "noqa" in lowered or "gradfix:" in lowered


def suppressed_codes(source: str) -> dict[int, frozenset[str]]:
    """Line (1-based) -> codes suppressed there (``{"*"}`` for all)."""
    found: dict[int, frozenset[str]] = {}
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return found
    for token in tokens:
        if token.type != tokenize.COMMENT:
            continue
        codes = _comment_codes(token.string)
        if codes is not None:
            line = token.start[0]
            found[line] = found.get(line, frozenset()) | codes
    return found


def _comment_codes(comment: str) -> frozenset[str] | None:
    for pattern in (NOQA, IGNORE):
        match = pattern.search(comment)
        if match is None:
            continue
        codes = match.group("codes")
        if not codes:
            return ALL
        return frozenset(c.upper() for c in re.split(r"[\s,]+", codes.strip()) if c)
    return None


def unsuppressed(
    reports: Sequence[Report],
    source: str,
    statement_line: Callable[[Report], int | None],
) -> list[Report]:
    """``reports`` without those a comment suppresses. A fix shared with a suppressed
    finding (one ``with torch.no_grad():`` around several updates) is dropped: a
    suppressed line is never rewritten; the other findings stay, without that fix."""
    comments = suppressed_codes(source)
    if not comments:
        return list(reports)
    kept, dropped_fixes = [], set()
    for report in reports:
        lines = {report.position.start.line}
        first = statement_line(report)  # the line the statement holding it starts on
        if first is not None:
            lines.add(first)
        codes = frozenset().union(*(comments.get(line, frozenset()) for line in lines))
        if codes & ALL or report.rule.code.upper() in codes:
            dropped_fixes.add(id(report.fix))
        else:
            kept.append(report)
    return [
        dataclasses.replace(r, fix=None) if r.fix is not None and id(r.fix) in dropped_fixes else r
        for r in kept
    ]
