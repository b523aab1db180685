"""Long texts shortened to one readable line: verdict reasons, error messages.

A verdict's reason can run to thousands of characters (every leaf compared, every
tolerance); the line a user reads keeps its structure and drops the detail: the longest
parenthesised details collapse to ``(…)`` first, then the text is cut at the last clause
boundary (``; ``, ``: ``, ``, ``) or word that fits, never inside a word, and ends with
``…``. The full text stays where machines read it (``--format json``, ``--report``).
No imports: the verifier's runner processes use it too.
"""

from __future__ import annotations

#: the longest verdict reason shown on a line (the path, position and code come before it)
REASON_CHARS = 240
ELLIPSIS = "…"
#: parenthesised details shorter than this are kept when collapsing
_SHORT_DETAIL = 24


def shorten(text: str, limit: int = REASON_CHARS) -> str:
    """``text`` on one line, at most ``limit`` characters (see the module docstring)."""
    text = " ".join(text.split())
    while len(text) > limit:
        span = _longest_detail(text)
        if span is None:
            break
        start, end = span
        text = f"{text[: start + 1]}{ELLIPSIS}{text[end:]}"
    if len(text) <= limit:
        return text
    head = text[: limit - len(ELLIPSIS)]
    for separator in ("; ", ": ", ", ", " "):
        cut = head.rfind(separator)
        if cut >= limit // 2:
            return head[:cut].rstrip(" ,;:") + " " + ELLIPSIS
    return head + ELLIPSIS


def _longest_detail(text: str) -> tuple[int, int] | None:
    """The ``(`` and ``)`` positions of the longest balanced parenthesised detail worth
    collapsing (None: there is none)."""
    best: tuple[int, int] | None = None
    opened: list[int] = []
    for position, char in enumerate(text):
        if char == "(":
            opened.append(position)
        elif char == ")" and opened:
            start = opened.pop()
            inner = text[start + 1 : position]
            if len(inner) >= _SHORT_DETAIL and inner != ELLIPSIS:
                if best is None or position - start > best[1] - best[0]:
                    best = (start, position)
    return best
