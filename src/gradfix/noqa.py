"""``gradfix check --add-noqa``: write ``# noqa: CODE`` on every line with a finding.

For adopting gradfix on an existing codebase (ruff's ``--add-noqa``): afterwards the
codebase checks clean and only new code is held to the rules. An existing ``# noqa: ...``
comment gets the new codes merged in; a line that continues with a backslash or ends
inside a string cannot take a comment and is left alone (its finding stays). In a
notebook the comment goes into the cell's source
(:func:`gradfix.notebook.add_noqa_to_notebook`).

    add_noqa("x = torch.tensor([a, b])\\n", {1: {"GF101"}})
    # 'x = torch.tensor([a, b])  # noqa: GF101\\n'
"""

from __future__ import annotations

import io
import re
import tokenize
from collections.abc import Iterable, Sequence

from gradfix.fileio.files import FileError, read_source, write_source
from gradfix.fileio.text import LINE, LINE_BREAK
from gradfix.rule import Finding
from gradfix.suppression import IGNORE, NOQA

#: line breaks as LSP and LibCST count them (not form feeds, unlike ``str.splitlines``)
CODE_SEPARATOR = re.compile(r"[\s,]+")


def add_noqa(source: str, codes_by_line: dict[int, set[str]]) -> tuple[str, int]:
    """``source`` with the codes added as noqa comments; returns it and how many lines
    changed."""
    text, commented = comment_lines(source, codes_by_line)
    return text, len(commented)


def comment_lines(source: str, codes_by_line: dict[int, set[str]]) -> tuple[str, set[int]]:
    """``source`` with the codes added as noqa comments, and the numbers of the lines
    that got one."""
    lines = LINE.findall(source)
    comments = line_comments(source)
    commented = set()
    for number, codes in sorted(codes_by_line.items()):
        edit = noqa_edit(source, number, sorted(codes), comments)
        if edit is not None and 1 <= number <= len(lines):
            column, text = edit
            lines[number - 1] = lines[number - 1][:column] + text + lines[number - 1][column:]
            commented.add(number)
    return "".join(lines), commented


def codes_by_line(findings: Iterable[Finding]) -> dict[int, set[str]]:
    grouped: dict[int, set[str]] = {}
    for finding in findings:
        grouped.setdefault(finding.line, set()).add(finding.code)
    return grouped


def noqa_edit(
    source: str,
    line: int,
    codes: str | Sequence[str],
    comments: dict[int, str | None] | None = None,
) -> tuple[int, str] | None:
    """Where and what to insert on 1-based ``line`` to suppress ``codes`` there:
    ``(code point column, text)``, or ``None`` when it is suppressed already or a comment
    cannot end that line (inside a string or after a backslash continuation). An existing
    ``# noqa: ...`` or ``# gradfix: ignore[...]`` gets the code merged in. ``comments``
    (from :func:`line_comments`) saves tokenizing ``source`` again."""
    wanted = [codes] if isinstance(codes, str) else list(codes)
    comment = (comments if comments is not None else line_comments(source)).get(line)
    if comment is None or not wanted:
        return None
    text = LINE_BREAK.sub("", LINE.findall(source)[line - 1])
    end = len(text.rstrip())
    if not comment:
        return end, f"  # noqa: {', '.join(wanted)}"
    for pattern in (NOQA, IGNORE):
        match = pattern.search(comment)
        if match is None:
            continue
        present = match.group("codes")
        if not present:
            return None  # a comment without codes suppresses every rule already
        known = {c.upper() for c in CODE_SEPARATOR.split(present)}
        missing = [code for code in wanted if code.upper() not in known]
        if not missing:
            return None
        column = len(text) - len(comment) + match.end("codes")
        return column, "".join(f", {code}" for code in missing)
    return end, f"  # noqa: {', '.join(wanted)}"


def line_comments(source: str) -> dict[int, str | None]:
    """Line -> the comment ending it (``""`` if none); lines where a comment cannot go
    (continued by a backslash, inside a string) are absent."""
    found: dict[int, str | None] = {}
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            row = token.start[0]
            if token.type == tokenize.COMMENT:
                found[row] = token.string
            elif token.type in (tokenize.NEWLINE, tokenize.NL, tokenize.ENDMARKER):
                found.setdefault(row, "")
    except (tokenize.TokenError, SyntaxError):
        return {}
    return found


def add_noqa_to_file(
    path: str,
    findings: Sequence[Finding],
    checked: str | None = None,
    tree: Sequence[str] = (),
) -> tuple[int, list[Finding]]:
    """Add noqa comments for ``findings`` to the file at ``path`` (a notebook's go into
    its cells), atomically. ``checked`` is the text the findings were found in: a file
    that no longer holds it is not touched; nor is a link to a file outside ``tree``
    (:func:`gradfix.fileio.files.write_source`). Returns the number of lines changed and
    the findings whose line cannot take a comment; raises ``OSError`` (one line)."""
    from gradfix.notebook import NotebookError, add_noqa_to_notebook, is_notebook

    try:
        source = read_source(path)
    except FileError as error:
        raise OSError(str(error)) from None
    if checked is not None and source.text != checked:
        raise OSError("the file changed since it was checked; not written")
    if is_notebook(path):
        try:
            text, commented = add_noqa_to_notebook(source.text, findings)
        except NotebookError as error:
            raise OSError(str(error)) from None
    else:
        text, lines = comment_lines(source.text, codes_by_line(findings))
        commented = {(None, line) for line in lines}
    if commented:
        try:
            write_source(source, text, tree=tree)
        except FileError as error:
            raise OSError(str(error)) from None
    missed = [finding for finding in findings if (finding.cell, finding.line) not in commented]
    return len(commented), missed
