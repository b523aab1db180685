"""``gradfix check --add-noqa``: write ``# noqa: CODE`` on every line with a finding.

For adopting gradfix on an existing codebase (ruff's ``--add-noqa``): afterwards the
codebase checks clean and only new code is held to the rules. An existing ``# noqa: ...``
comment gets the new codes merged in; a line that continues with a backslash or ends
inside a string cannot take a comment and is left alone.

    add_noqa("x = torch.tensor([a, b])\\n", {1: {"GF101"}})
    # 'x = torch.tensor([a, b])  # noqa: GF101\\n'
"""

from __future__ import annotations

import io
import re
import tokenize
from collections.abc import Iterable

from gradfix.files import FileError, read_source, write_source
from gradfix.rule import Finding

EXISTING = re.compile(r"#\s*noqa:\s*(?P<codes>[A-Za-z]+[0-9]+(?:[\s,]+[A-Za-z]+[0-9]+)*)", re.I)
BLANKET = re.compile(r"#\s*noqa(?!:)", re.I)


def add_noqa(source: str, codes_by_line: dict[int, set[str]]) -> tuple[str, int]:
    """``source`` with the codes added as noqa comments; returns it and how many lines
    changed."""
    lines = source.splitlines(keepends=True)
    blocked = _lines_ending_in_strings(source)
    changed = 0
    for number, codes in sorted(codes_by_line.items()):
        if not 1 <= number <= len(lines) or number in blocked:
            continue
        updated = _with_codes(lines[number - 1], codes)
        if updated != lines[number - 1]:
            lines[number - 1] = updated
            changed += 1
    return "".join(lines), changed


def _with_codes(line: str, codes: set[str]) -> str:
    body = line.rstrip("\r\n")
    ending = line[len(body) :]
    if body.rstrip().endswith("\\") or BLANKET.search(body):
        return line
    match = EXISTING.search(body)
    if match is not None:
        present = [c.upper() for c in re.split(r"[\s,]+", match.group("codes")) if c]
        merged = present + sorted(codes - set(present))
        body = body[: match.start("codes")] + ", ".join(merged) + body[match.end("codes") :]
        return body + ending
    return f"{body.rstrip()}  # noqa: {', '.join(sorted(codes))}{ending}"


def _lines_ending_in_strings(source: str) -> set[int]:
    """Lines whose end lies inside a (triple-quoted) string: a comment cannot go there."""
    blocked: set[int] = set()
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.STRING and token.end[0] > token.start[0]:
                blocked.update(range(token.start[0], token.end[0]))
    except (tokenize.TokenError, SyntaxError):
        pass
    return blocked


def add_noqa_to_file(path: str, findings: Iterable[Finding]) -> int:
    """Add noqa comments for ``findings`` to the file at ``path`` (atomically; never over
    a file that changed since it was read). Returns the number of lines changed."""
    codes_by_line: dict[int, set[str]] = {}
    for finding in findings:
        codes_by_line.setdefault(finding.line, set()).add(finding.code)
    try:
        source = read_source(path)
    except FileError as error:
        raise OSError(str(error)) from None
    text, changed = add_noqa(source.text, codes_by_line)
    if changed:
        try:
            write_source(source, text)
        except FileError as error:
            raise OSError(str(error)) from None
    return changed
