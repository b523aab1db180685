"""Jupyter notebooks: check and fix the code cells of an ``.ipynb`` file as one program.

A notebook (nbformat 4 JSON) becomes one Python source so that names flow between cells
(a tensor defined in cell 1 and misused in cell 3 is found): each code cell is preceded
by a marker comment line, and IPython syntax the parser does not know (``%matplotlib
inline``, ``!pip install x``, ``obj?``, ``files = !ls``, the ``%%time`` line of a cell
magic whose body is Python) is replaced line for line by a placeholder statement
(``...  # gradfix: magic 3.0``), so line numbers inside a cell do not move and the program
still runs. Cells under any other cell magic (``%%bash``,
``%%writefile``) are skipped.

After fixing, the source is split back at the markers. A cell maps back cleanly when
every marker is still a line of its own, in order, every placeholder line of the cell is
still there exactly once and unchanged, and the cell parses on its own. A fix that breaks
this (wrapping statements of two cells in one ``with`` block, say) is not applied and
its finding stays reported. The placeholders are then replaced by the original magic
lines, byte for byte.

Writing changes only the ``source`` of the changed code cells (a list of lines, as
Jupyter writes it); outputs, execution counts, metadata, key order, indentation and the
final newline are kept: the JSON is re-serialised only when serialising the unchanged
notebook gives back the file byte for byte.

    lint = lint_notebook(text, rules=ALL_RULES, path="nb.ipynb", fix=True)
    lint.findings[0].cell, lint.findings[0].line   # cell number (1-based), line in it
    lint.text                                      # the fixed notebook file text
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from gradfix.diff import split_lines, unified_diff
from gradfix.engine import MAX_PASSES, RuleCrash, SourceError, lint_source, single_fixes
from gradfix.rule import Finding, Rule

NOTEBOOK_SUFFIX = ".ipynb"
#: the line put before each code cell in the program; its number is the cell's index
CELL_MARKER = "# gradfix: notebook cell {index}\n"
_MARKER_PATTERN = re.compile(r"# gradfix: notebook cell (\d+)\n")
#: cell magics whose body is Python (ruff's list): the cell is checked, its magic kept
PYTHON_CELL_MAGICS = frozenset(
    {"capture", "debug", "prun", "pypy", "python", "python3", "time", "timeit"}
)
#: a line magic or shell escape, bare or assigned (``%time f()``, ``!ls``, ``x = !ls``)
_LINE_MAGIC = re.compile(r"\s*(?:[\w.,\s]+=\s*)?[%!]")
#: IPython help: ``?obj``, ``??obj``, ``obj?``, ``obj.attr??``
_HELP = re.compile(r"\s*(?:\?{1,2}\S.*|[\w.\[\]()]+\?{1,2})\s*")
_CROSSING_NOTE = "did not apply a fix that would move code across notebook cells ({}): {}"
_LAYOUT_NOTE = (
    "fixes not applied: the notebook's JSON layout is not the one Jupyter writes "
    "(re-save it with Jupyter, then run again)"
)


class NotebookError(SourceError):
    """The file is not a notebook gradfix can read. ``str()`` is one line."""


@dataclass(frozen=True)
class JsonStyle:
    """How the file was serialised, so that writing it back keeps every byte."""

    indent: int | None
    ensure_ascii: bool
    separators: tuple[str, str]
    final_newline: bool

    def dump(self, data: object) -> str:
        text = json.dumps(
            data, indent=self.indent, ensure_ascii=self.ensure_ascii, separators=self.separators
        )
        return text + "\n" if self.final_newline else text


@dataclass(frozen=True)
class Cell:
    """One code cell as the program holds it."""

    #: index in the notebook's ``cells`` list (0-based; messages show ``index + 1``)
    index: int
    #: the cell's Python, magic lines replaced by placeholders, ending with a newline
    text: str
    #: placeholder line -> the original line it stands for
    magics: dict[str, str] = field(default_factory=dict)
    #: whether the cell's source ended with a newline (Jupyter's usually do not)
    final_newline: bool = False


@dataclass(frozen=True)
class Program:
    """The code cells of a notebook concatenated into one Python source."""

    cells: tuple[Cell, ...]

    @property
    def source(self) -> str:
        return "".join(CELL_MARKER.format(index=cell.index) + cell.text for cell in self.cells)

    def split(self, source: str) -> dict[int, str] | None:
        """The cells' original-syntax sources in ``source`` (a fixed program), by cell index;
        ``None`` when some cell does not map back cleanly."""
        chunks = _chunks(source, [cell.index for cell in self.cells])
        if chunks is None:
            return None
        restored = {}
        for cell, chunk in zip(self.cells, chunks):
            text = _restore(cell, chunk)
            if text is None:
                return None
            restored[cell.index] = text
        return restored


@dataclass
class NotebookLint:
    """What :func:`lint_notebook` returns; findings carry their ``cell``."""

    findings: list[Finding]
    #: findings left after fixing (positions in the fixed cells)
    remaining: list[Finding]
    #: the notebook file text after fixing (== the input when nothing changed)
    text: str
    #: one line per fix not applied (broke the syntax, crossed cells, JSON layout)
    dropped: list[str] = field(default_factory=list)
    #: rules that raised on the notebook's code (:attr:`LintResult.crashes`)
    crashes: list[RuleCrash] = field(default_factory=list)


def is_notebook(path: str) -> bool:
    return path.lower().endswith(NOTEBOOK_SUFFIX)


# --- reading -------------------------------------------------------------------------------


def load_notebook(text: str) -> dict[str, Any]:
    """Parse and validate notebook JSON; raise :class:`NotebookError` (one line)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise NotebookError(
            f"not a Jupyter notebook: invalid JSON at line {error.lineno} column {error.colno}: "
            f"{error.msg}"
        ) from None
    except RecursionError:
        raise NotebookError("not a Jupyter notebook: JSON nested too deeply") from None
    if not isinstance(data, dict) or not isinstance(data.get("nbformat"), int):
        raise NotebookError('not a Jupyter notebook: no "nbformat" version')
    if data["nbformat"] < 4:
        raise NotebookError(
            f"nbformat {data['nbformat']} notebook: only nbformat 4 is supported "
            "(convert it: jupyter nbconvert --to notebook --nbformat 4)"
        )
    if not isinstance(data.get("cells"), list):
        raise NotebookError('not a Jupyter notebook: no "cells" list')
    return data


def build_program(data: dict[str, Any]) -> Program:
    """The Python code cells of ``data``; raise :class:`NotebookError` for a cell that does
    not parse (it names the cell and the line in it)."""
    if not _is_python(data):
        return Program(())
    cells = []
    for index, raw in enumerate(data["cells"]):
        if not isinstance(raw, dict) or raw.get("cell_type") != "code":
            continue
        cell = _code_cell(index, _cell_source(raw))
        if cell is not None:
            _check_cell_syntax(cell)
            cells.append(cell)
    return Program(tuple(cells))


def _is_python(data: dict[str, Any]) -> bool:
    """A notebook of another kernel (R, Julia) holds no Python to check."""
    metadata = data.get("metadata")
    language = None
    if isinstance(metadata, dict):
        info = metadata.get("language_info")
        if isinstance(info, dict):
            language = info.get("name")
    return not isinstance(language, str) or language.lower() == "python"


def _cell_source(raw: dict[str, Any]) -> str:
    source = raw.get("source", "")
    if isinstance(source, list) and all(isinstance(line, str) for line in source):
        return "".join(source)
    if isinstance(source, str):
        return source
    raise NotebookError("not a Jupyter notebook: a cell's source is neither text nor lines")


def _code_cell(index: int, source: str) -> Cell | None:
    """The cell with its magics replaced, or ``None`` for a cell magic that is not Python.
    A cell that parses as it is has no magic (``% b`` may continue an expression)."""
    if _parses(source):
        return Cell(index, _ended(source), {}, source.endswith("\n"))
    lines = split_lines(source)
    magics: dict[str, str] = {}
    in_magic = False  # the previous line was a magic continued with a backslash
    indent = ""
    for number, line in enumerate(lines):
        cell_magic = number == 0 and line.startswith("%%")
        if cell_magic and _cell_magic_name(line) not in PYTHON_CELL_MAGICS:
            return None
        if not (in_magic or cell_magic or _is_magic(line)):
            continue
        if not in_magic:
            indent = line[: len(line) - len(line.lstrip())]
        # a no-op statement: valid in any block, and the program still runs
        placeholder = f"{indent}...  # gradfix: magic {index}.{number}\n"
        magics[placeholder] = line if line.endswith("\n") else line + "\n"
        lines[number] = placeholder
        in_magic = line.rstrip("\r\n").endswith("\\")
    return Cell(index, _ended("".join(lines)), magics, source.endswith("\n"))


def _cell_magic_name(line: str) -> str:
    words = line[2:].split()
    return words[0] if words else ""


def _is_magic(line: str) -> bool:
    return bool(_LINE_MAGIC.match(line) or _HELP.fullmatch(line))


def _parses(source: str) -> bool:
    try:
        ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


def _check_cell_syntax(cell: Cell) -> None:
    try:
        ast.parse(cell.text)
    except SyntaxError as error:
        raise NotebookError(
            f"cell {cell.index + 1}: syntax error at line {error.lineno}: {error.msg}"
        ) from None
    except (ValueError, RecursionError, MemoryError) as error:
        raise NotebookError(f"cell {cell.index + 1}: cannot parse: {error}") from None


# --- mapping back --------------------------------------------------------------------------


def _chunks(source: str, indexes: Sequence[int]) -> list[str] | None:
    """``source`` cut at its marker lines, which must be the ones of ``indexes`` in order.
    Lines before the first marker (an import the engine added on top) go to the first
    cell."""
    leading: list[str] = []
    chunks: list[list[str]] = []
    found: list[int] = []
    for line in split_lines(source):
        marker = _MARKER_PATTERN.fullmatch(line)
        if marker is not None:
            found.append(int(marker.group(1)))
            chunks.append([])
        else:
            (chunks[-1] if chunks else leading).append(line)
    if found != list(indexes):
        return None
    chunks[0][:0] = leading
    return ["".join(chunk) for chunk in chunks]


def _restore(cell: Cell, chunk: str) -> str | None:
    """The cell's text in ``chunk`` with its magic lines back, or ``None`` when the chunk
    does not parse alone or a placeholder line was changed, moved out or duplicated."""
    if not _parses(chunk):
        return None
    lines = split_lines(chunk)
    for placeholder, original in cell.magics.items():
        if lines.count(placeholder) != 1:
            return None
        lines[lines.index(placeholder)] = original
    text = "".join(lines)
    if not cell.final_newline and text.endswith("\n"):
        text = text[:-1]
    return text


def locate(finding: Finding, source: str) -> Finding:
    """``finding`` (a position in the program ``source``) with its cell number (1-based,
    counting every cell like Jupyter's own order) and its line inside that cell."""
    cell_start, cell_index = 0, 0
    for number, line in enumerate(split_lines(source)[: finding.line], start=1):
        marker = _MARKER_PATTERN.fullmatch(line)
        if marker is not None:
            cell_start, cell_index = number, int(marker.group(1))
    return replace(
        finding,
        cell=cell_index + 1,
        line=finding.line - cell_start,
        end_line=finding.end_line - cell_start,
    )


# --- linting and fixing --------------------------------------------------------------------


def lint_notebook(
    text: str,
    *,
    rules: Sequence[type[Rule]],
    path: str = "<stdin>.ipynb",
    fix: bool = False,
    unsafe_fixes: bool = False,
) -> NotebookLint:
    """Lint (and fix) the notebook file ``text``; raise :class:`NotebookError` when it is not
    a readable nbformat 4 notebook. Pure: no I/O."""
    data = load_notebook(text)
    program = build_program(data)
    if not program.cells:
        return NotebookLint([], [], text)
    source = program.source
    lint = lint_source(source, rules=rules, path=path)
    findings = [locate(finding, source) for finding in lint.findings]
    result = NotebookLint(findings, list(findings), text, crashes=lint.crashes)
    if not fix or not any(finding.fix for finding in findings):
        return result
    style = detect_style(text, data)
    if style is None:
        result.dropped.append(_LAYOUT_NOTE)
        return result
    fixed, result.dropped = fix_program(program, rules, path=path, unsafe_fixes=unsafe_fixes)
    cells = program.split(fixed)
    if fixed == source or cells is None:
        return result
    result.text = render(data, cells, style)
    remaining = lint_source(fixed, rules=rules, path=path).findings
    result.remaining = [locate(finding, fixed) for finding in remaining]
    return result


def fix_program(
    program: Program, rules: Sequence[type[Rule]], *, path: str, unsafe_fixes: bool
) -> tuple[str, list[str]]:
    """The program with every fix applied whose result maps back to the cells; the fixes
    that would move code across cells are left out (one note each)."""
    source = program.source
    notes: list[str] = []
    for _ in range(MAX_PASSES):
        lint = lint_source(source, rules=rules, path=path, fix=True, unsafe_fixes=unsafe_fixes)
        if not lint.changed or program.split(lint.source) is not None:
            return lint.source, notes + lint.dropped
        crossing, refused = _crossing_fixes(program, source, rules, path)
        notes += [note for note in refused if note not in notes]
        step = lint_source(
            source,
            rules=rules,
            path=path,
            fix=True,
            unsafe_fixes=unsafe_fixes,
            keep=lambda finding, crossing=crossing: _key(finding) not in crossing,
        )
        if not step.changed or program.split(step.source) is None:
            break
        source = step.source
    return source, notes


def _crossing_fixes(
    program: Program, source: str, rules: Sequence[type[Rule]], path: str
) -> tuple[set[tuple[int, int, str]], list[str]]:
    """The findings (keys) of the fixes that, applied alone, break the cell layout, and
    one note per such fix."""
    keys: set[tuple[int, int, str]] = set()
    notes = []
    for single in single_fixes(source, rules=rules, path=path):
        if single.source is not None and program.split(single.source) is not None:
            continue
        keys.update(_key(finding) for finding in single.findings)
        cells = [locate(finding, source) for finding in single.findings]
        where = ", ".join(f"{f.code} at cell {f.cell} line {f.line}" for f in cells)
        notes.append(_CROSSING_NOTE.format(where, single.description))
    return keys, notes


def _key(finding: Finding) -> tuple[int, int, str]:
    return (finding.line, finding.col, finding.code)


# --- writing -------------------------------------------------------------------------------


def detect_style(text: str, data: object) -> JsonStyle | None:
    """The serialisation that gives back ``text`` from ``data``, or ``None``."""
    final_newline = text.endswith("\n")
    lines = text.split("\n", 2)
    indents: list[int | None] = [None]
    if len(lines) > 1:
        indents.insert(0, len(lines[1]) - len(lines[1].lstrip(" ")))
    for indent in indents:
        separators = [(",", ": ")] if indent is not None else [(", ", ": "), (",", ":")]
        for separator in separators:
            for ensure_ascii in (False, True):
                style = JsonStyle(indent, ensure_ascii, separator, final_newline)
                if style.dump(data) == text:
                    return style
    return None


def render(data: dict[str, Any], sources: dict[int, str], style: JsonStyle) -> str:
    """The notebook text with the cells of ``sources`` given new sources (lists of lines);
    ``data`` is not modified."""
    cells = list(data["cells"])
    for index, text in sources.items():
        if _cell_source(cells[index]) != text:
            cells[index] = {**cells[index], "source": split_lines(text)}
    return style.dump({**data, "cells": cells})


# --- diff ----------------------------------------------------------------------------------


def notebook_diff(before: str, after: str, path: str) -> str:
    """A unified diff of each changed code cell, headed ``a/nb.ipynb:cell 3``; not a patch
    for the JSON file, a preview to read."""
    old_cells = load_notebook(before)["cells"]
    new_cells = load_notebook(after)["cells"]
    parts = []
    for number, (old, new) in enumerate(zip(old_cells, new_cells), start=1):
        old_source, new_source = _cell_source(old), _cell_source(new)
        if old_source != new_source:
            name = f"{path}:cell {number}"
            parts.append(unified_diff(_ended(old_source), _ended(new_source), name))
    return "".join(parts)


def _ended(text: str) -> str:
    """``text`` with a final newline (Jupyter's last line has none)."""
    return text if not text or text.endswith("\n") else text + "\n"
