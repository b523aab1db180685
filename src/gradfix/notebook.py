"""Jupyter notebooks: check and fix the code cells of an ``.ipynb`` file as one program.

A notebook (nbformat 4 JSON) becomes one Python source so that names flow between cells
(a tensor defined in cell 1 and misused in cell 3 is found): each code cell is preceded
by a marker comment line, and IPython syntax the parser does not know (``%matplotlib
inline``, ``!pip install x``, ``obj?``, ``files = !ls``, the ``%%time`` line of a cell
magic whose body is Python) is replaced line for line by a placeholder statement
(``...  # gradfix: magic 3.0``), so line numbers inside a cell do not move and the program
still runs. A cell whose first line is indented, which IPython runs without that
indentation, is held in a block opened on its marker line (``if True:  # gradfix:
notebook cell 3``), so its lines and columns stay too. Cells under any other cell magic
(``%%bash``, ``%%writefile``) are skipped. A code cell that still does not parse (an
exercise blank ``model = ``) is left out of the program with one line saying why
(``Program.skipped``); the other cells are checked together, and no fix touches it.

After fixing, the source is split back at the markers. A cell maps back cleanly when
every marker is still a line of its own, in order, every placeholder line of the cell is
still there exactly once and unchanged, and the cell parses on its own. A fix that breaks
this (wrapping statements of two cells in one ``with`` block, say) is not applied and
its finding stays reported. The placeholders are then replaced by the original magic
lines, byte for byte.

Writing changes only the ``source`` of the changed code cells (a list of lines, as
Jupyter writes it); outputs, execution counts, metadata, key order, indentation and the
final newline are kept: the JSON is re-serialised only when serialising the unchanged
notebook gives back the file byte for byte. ``check --add-noqa`` writes its comments the
same way (:func:`add_noqa_to_notebook`), and the ``fix`` preview is a diff of the JSON
text, each hunk naming its cell (:func:`cell_at_line`), which ``git apply`` takes.

    lint = lint_notebook(text, rules=ALL_RULES, path="nb.ipynb", fix=True)
    lint.findings[0].cell, lint.findings[0].line   # cell number (1-based), line in it
    lint.text                                      # the fixed notebook file text
"""

from __future__ import annotations

import bisect
import functools
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from gradfix import pyast
from gradfix.engine import MAX_PASSES, RuleCrash, SourceError, lint_source, single_fixes
from gradfix.fileio.files import is_notebook as is_notebook  # re-exported
from gradfix.fileio.text import split_lines
from gradfix.noqa import codes_by_line, comment_lines
from gradfix.rule import Finding, Rule

#: the line put before each code cell in the program; its number is the cell's index
CELL_MARKER = "# gradfix: notebook cell {index}\n"
#: the marker of an indented cell opens a block for it, so its lines and columns stay
INDENTED_CELL_MARKER = "if True:  " + CELL_MARKER
_MARKER_PATTERN = re.compile(r"(?:if True:  )?# gradfix: notebook cell (\d+)\n")
_BLOCK = "if True:\n"
#: cell magics whose body is Python (ruff's list): the cell is checked, its magic kept
PYTHON_CELL_MAGICS = frozenset(
    {"capture", "debug", "prun", "pypy", "python", "python3", "time", "timeit"}
)
#: a line magic or shell escape, bare or assigned (``%time f()``, ``!ls``, ``x = !ls``)
_LINE_MAGIC = re.compile(r"\s*(?:[\w.,\s]+=\s*)?[%!]")
#: IPython help: ``?obj``, ``??obj``, ``obj?``, ``obj.attr??``, and the wildcard search
#: ``torch.*Tensor?``
_HELP = re.compile(r"\s*(?:\?{1,2}\S.*|[\w.\[\]()*]+\?{1,2})\s*")
_CROSSING_NOTE = "did not apply a fix that would move code across notebook cells ({}): {}"
_LAYOUT_PROBLEM = (
    "the notebook's JSON layout is not the one Jupyter writes "
    "(re-save it with Jupyter, then run again)"
)
_LAYOUT_NOTE = "fixes not applied: " + _LAYOUT_PROBLEM


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
    #: its first line that is not blank is indented (IPython removes that indentation):
    #: the program holds the cell in a block (:data:`INDENTED_CELL_MARKER`)
    indented: bool = False

    @property
    def parsed_text(self) -> str:
        """The cell's text as Python parses it alone (an indented one inside a block)."""
        return _BLOCK + self.text if self.indented else self.text


@dataclass(frozen=True)
class Program:
    """The code cells of a notebook concatenated into one Python source."""

    cells: tuple[Cell, ...]
    #: one line per code cell left out because it does not parse, without the path
    #: (``cell 4: skipped: syntax error at line 1: invalid syntax``)
    skipped: tuple[str, ...] = ()

    @property
    def source(self) -> str:
        return "".join(
            (INDENTED_CELL_MARKER if cell.indented else CELL_MARKER).format(index=cell.index)
            + cell.text
            for cell in self.cells
        )

    def split(self, source: str) -> dict[int, str] | None:
        """The cells' original-syntax sources in ``source`` (a fixed program), by cell index;
        ``None`` when some cell does not map back cleanly."""
        first = self.cells[0]
        indent = _first_indent(first.text) if first.indented else ""
        chunks = _chunks(source, [cell.index for cell in self.cells], indent)
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
    #: one line per code cell not checked because it does not parse (:class:`Program`)
    skipped: list[str] = field(default_factory=list)
    #: rules that raised on the notebook's code (:attr:`LintResult.crashes`)
    crashes: list[RuleCrash] = field(default_factory=list)


def code_cell(index: int, source: str) -> Cell | None:
    """One code cell as :func:`build_program` holds it (IPython lines replaced), ``None``
    for a cell magic whose body is not Python; raise :class:`NotebookError` when it does
    not parse. For a caller that has the cells, not the JSON (the language server)."""
    cell = _code_cell(index, source)
    if cell is not None:
        _check_cell_syntax(cell)
    return cell


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
    """The Python code cells of ``data``. A cell that does not parse (an exercise blank
    ``model = ``) is left out, with one line saying why: the others are still checked
    together, and no fix ever touches it."""
    if not _is_python(data):
        return Program(())
    cells = []
    skipped = []
    for index, raw in enumerate(data["cells"]):
        if not isinstance(raw, dict) or raw.get("cell_type") != "code":
            continue
        cell = _code_cell(index, _cell_source(raw))
        if cell is None:
            continue
        problem = _syntax_problem(cell)
        if problem is None:
            cells.append(cell)
        else:
            skipped.append(f"cell {index + 1}: skipped: {problem}")
    return Program(tuple(cells), tuple(skipped))


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
    text = _ended("".join(lines))
    return Cell(index, text, magics, source.endswith("\n"), bool(_first_indent(text)))


def _first_indent(text: str) -> str:
    """The indentation of the first line that is not blank: IPython removes it from every
    line of the cell that starts with it."""
    first = next((line for line in split_lines(text) if line.strip()), "")
    return first[: len(first) - len(first.lstrip(" \t"))]


def _ended(text: str) -> str:
    """``text`` with a final newline (Jupyter's last line has none)."""
    return text if not text or text.endswith("\n") else text + "\n"


def _cell_magic_name(line: str) -> str:
    words = line[2:].split()
    return words[0] if words else ""


def _is_magic(line: str) -> bool:
    return bool(_LINE_MAGIC.match(line) or _HELP.fullmatch(line))


def _parses(source: str) -> bool:
    try:
        pyast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


def _check_cell_syntax(cell: Cell) -> None:
    """Raise :class:`NotebookError` (``cell 4: syntax error at line 1: ...``) when ``cell``
    does not parse: for a caller that checks one cell at a time (the language server)."""
    problem = _syntax_problem(cell)
    if problem is not None:
        raise NotebookError(f"cell {cell.index + 1}: {problem}")


def _syntax_problem(cell: Cell) -> str | None:
    """Why ``cell`` does not parse (one line, lines counted in the cell), or ``None``."""
    try:
        pyast.parse(cell.parsed_text)
    except SyntaxError as error:
        line = error.lineno - 1 if cell.indented and error.lineno else error.lineno
        return f"syntax error at line {line}: {error.msg}"
    except (ValueError, RecursionError, MemoryError) as error:
        return f"cannot parse: {error}"
    return None


# --- mapping back --------------------------------------------------------------------------


def _chunks(source: str, indexes: Sequence[int], indent: str = "") -> list[str] | None:
    """``source`` cut at its marker lines, which must be the ones of ``indexes`` in order.
    Lines before the first marker (an import the engine added on top) go to the first
    cell, with its ``indent``."""
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
    chunks[0][:0] = [indent + line if line.strip() else line for line in leading]
    return ["".join(chunk) for chunk in chunks]


def _restore(cell: Cell, chunk: str) -> str | None:
    """The cell's text in ``chunk`` with its magic lines back, or ``None`` when the chunk
    does not parse alone or a placeholder line was changed, moved out or duplicated."""
    if not _parses(replace(cell, text=chunk).parsed_text):
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
    counting every cell like Jupyter's own order) and its line inside that cell; the lines
    of the program its message and fix name become cells and lines too
    (:func:`name_cell_lines`)."""
    places = _program_places(source) or ((1, 0),)
    at = min(max(finding.line, 1), len(places))  # a finding's line is one of the program's
    cell, line = places[at - 1][0], places[at - 1][1] + finding.line - at
    first = finding.line - line
    fix = finding.fix
    if fix is not None:
        fix = replace(fix, description=name_cell_lines(fix.description, places))
    return replace(
        finding,
        cell=cell,
        line=line,
        end_line=finding.end_line - first,
        message=name_cell_lines(finding.message, places),
        fix=fix,
    )


@functools.lru_cache(maxsize=4)
def _program_places(source: str) -> tuple[tuple[int, int], ...]:
    """:func:`program_lines`, computed once per program: :func:`locate` is asked for each
    finding of it (once per finding made N findings cost N times the program)."""
    return tuple(program_lines(source))


def program_lines(source: str) -> list[tuple[int, int]]:
    """For each line of the program ``source``: its cell's number (1-based, as Jupyter
    counts) and its line in that cell (0 for the cell's marker line)."""
    places = []
    cell_start, cell_index = 0, 0
    for number, line in enumerate(split_lines(source), start=1):
        marker = _MARKER_PATTERN.fullmatch(line)
        if marker is not None:
            cell_start, cell_index = number, int(marker.group(1))
        places.append((cell_index + 1, number - cell_start))
    return places


#: a line of the program named in a message: ``line 64``, ``line 3-5``, ``line 3, 7``
_LINE_REFERENCE = re.compile(r"\bline (\d+(?:(?:-|, )\d+)*)\b")


def name_cell_lines(text: str, places: Sequence[tuple[int, int]]) -> str:
    """``text`` (a message about the program) with each line it names as the cell and the
    line in it: ``the backward at line 64`` -> ``the backward at cell 3, line 2``. Code
    quoted in backquotes is left as it is. ``places``: :func:`program_lines`."""

    def cell_line(match: re.Match[str]) -> str:
        numbers = [int(number) for number in re.findall(r"\d+", match.group(1))]
        if not all(1 <= number <= len(places) and places[number - 1][1] for number in numbers):
            return match.group(0)
        located = [places[number - 1] for number in numbers]
        cells = {cell for cell, _ in located}
        if len(cells) == 1:  # keep the separators: ``cell 3, line 2-4``
            lines = iter(str(line) for _, line in located)
            spelled = re.sub(r"\d+", lambda _: next(lines), match.group(1))
            return f"cell {located[0][0]}, line {spelled}"
        joint = " to " if "-" in match.group(1) else "; "
        return joint.join(f"cell {cell}, line {line}" for cell, line in located)

    parts = text.split("`")
    for index in range(0, len(parts), 2):  # outside backquotes
        parts[index] = _LINE_REFERENCE.sub(cell_line, parts[index])
    return "`".join(parts)


def source_position(text: str) -> Callable[[int, int, int], tuple[int, int]] | None:
    """For the notebook file ``text``: ``(cell, line, col)`` of a finding (cell 1-based,
    line and column 1-based in the cell's source) -> ``(line, col)`` in the file's JSON
    text, where that character of the cell's ``source`` is stored (a code-scanning
    annotation then lands on the line that holds the code). ``None`` when the text is
    not a notebook whose cells can be found; a position past its cell's source maps to
    the source's start."""
    try:
        data = load_notebook(text)
    except NotebookError:
        return None
    spans = _cell_spans(text)
    if len(spans) != len(data["cells"]):
        return None
    newlines = [match.start() for match in re.finditer("\n", text)]

    def position(cell: int, line: int, col: int) -> tuple[int, int]:
        offset = _source_offset(text, spans[cell - 1], line, col)
        number = bisect.bisect_left(newlines, offset)
        start = newlines[number - 1] + 1 if number else 0
        return number + 1, offset - start + 1

    return position


def _source_offset(text: str, span: tuple[int, int], line: int, col: int) -> int:
    """Where in ``text`` the cell's (JSON object at ``span``) source character at ``line``
    and ``col`` (1-based) is written: inside one of its JSON strings, escapes counted."""
    strings = _source_strings(text, span)
    if not strings:
        return span[0]
    wanted = sum(len(part) for part in split_lines(_decoded(text, strings))[: line - 1])
    wanted += col - 1
    for start, end in strings:
        offsets = _char_offsets(text, start, end)
        if wanted < len(offsets) - 1 or (start, end) == strings[-1]:
            return offsets[min(wanted, len(offsets) - 1)]
        wanted -= len(offsets) - 1
    return strings[0][0]


def _source_strings(text: str, span: tuple[int, int]) -> list[tuple[int, int]]:
    """The JSON string tokens (start and end offsets, quotes included) of the ``source``
    of the cell object at ``span``: the elements of its list, or the one string."""
    position = _skip_space(text, span[0] + 1)
    try:
        while text.startswith('"', position):
            key, position = _JSON.raw_decode(text, position)
            position = _skip_space(text, _skip_space(text, position) + 1)  # past ":"
            if key == "source":
                if text.startswith("[", position):
                    return _array_spans(text, position)
                return [(position, _JSON.raw_decode(text, position)[1])]
            position = _after_value(text, position)
    except (ValueError, RecursionError):
        pass
    return []


def _decoded(text: str, strings: Sequence[tuple[int, int]]) -> str:
    return "".join(_JSON.raw_decode(text, start)[0] for start, _ in strings)


def _char_offsets(text: str, start: int, end: int) -> list[int]:
    """The offset in ``text`` of each character of the JSON string token from ``start``
    to ``end`` (its quotes), and last, of the closing quote."""
    offsets = []
    position = start + 1
    while position < end - 1:
        offsets.append(position)
        if text[position] != "\\":
            position += 1
        elif text[position + 1] != "u":
            position += 2
        else:
            unit = int(text[position + 2 : position + 6], 16)
            position += 6
            if 0xD800 <= unit < 0xDC00 and text.startswith("\\u", position):
                position += 6  # a surrogate pair is one character
    offsets.append(end - 1)
    return offsets


# --- linting and fixing --------------------------------------------------------------------


def lint_notebook(
    text: str,
    *,
    rules: Sequence[type[Rule]],
    path: str = "<stdin>.ipynb",
    fix: bool = False,
    unsafe_fixes: bool = False,
    keep: Callable[[Finding], bool] | None = None,
) -> NotebookLint:
    """Lint (and fix) the notebook file ``text``; raise :class:`NotebookError` when it is not
    a readable nbformat 4 notebook. Pure: no I/O. ``keep``: only the fixes whose findings
    it accepts, the findings at their positions in the joined program (as the verifier,
    which runs that program, names them)."""
    data = load_notebook(text)
    program = build_program(data)
    if not program.cells:
        return NotebookLint([], [], text, skipped=list(program.skipped))
    source = program.source
    lint = lint_source(source, rules=rules, path=path)
    findings = [locate(finding, source) for finding in lint.findings]
    result = NotebookLint(
        findings, list(findings), text, skipped=list(program.skipped), crashes=lint.crashes
    )
    if not fix or not any(finding.fix for finding in findings):
        return result
    style = detect_style(text, data)
    if style is None:
        result.dropped.append(_LAYOUT_NOTE)
        return result
    fixed, result.dropped = fix_program(
        program, rules, path=path, unsafe_fixes=unsafe_fixes, keep=keep
    )
    cells = program.split(fixed)
    if fixed == source or cells is None:
        return result
    result.text = render(data, cells, style)
    remaining = lint_source(fixed, rules=rules, path=path).findings
    result.remaining = [locate(finding, fixed) for finding in remaining]
    return result


def fix_program(
    program: Program,
    rules: Sequence[type[Rule]],
    *,
    path: str,
    unsafe_fixes: bool,
    keep: Callable[[Finding], bool] | None = None,
) -> tuple[str, list[str]]:
    """The program with every fix applied whose result maps back to the cells (and that
    ``keep`` accepts, when given); the fixes that would move code across cells are left
    out (one note each)."""
    source = program.source
    notes: list[str] = []
    accept = keep or (lambda finding: True)
    for _ in range(MAX_PASSES):
        lint = lint_source(
            source, rules=rules, path=path, fix=True, unsafe_fixes=unsafe_fixes, keep=keep
        )
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
            keep=lambda finding, crossing=crossing: (
                _key(finding) not in crossing and accept(finding)
            ),
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
        description = name_cell_lines(single.description, program_lines(source))
        notes.append(_CROSSING_NOTE.format(where, description))
    return keys, notes


def _key(finding: Finding) -> tuple[int, int, str]:
    return (finding.line, finding.col, finding.code)


# --- noqa comments -------------------------------------------------------------------------


def add_noqa_to_notebook(
    text: str, findings: Sequence[Finding]
) -> tuple[str, set[tuple[int | None, int]]]:
    """``text`` (a notebook file) with a ``# noqa`` comment for each of ``findings`` written
    into its cell's source, every other byte kept; and the ``(cell, line)`` of the lines
    that got one (cells 1-based as in findings). Raise :class:`NotebookError` when the
    file's JSON layout cannot be written back byte for byte."""
    data = load_notebook(text)
    sources: dict[int, str] = {}
    commented: set[tuple[int | None, int]] = set()
    for cell in build_program(data).cells:
        here = [finding for finding in findings if finding.cell == cell.index + 1]
        if not here:
            continue
        cell_text, lines = comment_lines(cell.text, codes_by_line(here))
        restored = _restore(cell, cell_text) if lines else None
        if restored is not None:
            sources[cell.index] = restored
            commented.update((cell.index + 1, line) for line in lines)
    if not sources:
        return text, set()
    style = detect_style(text, data)
    if style is None:
        raise NotebookError(_LAYOUT_PROBLEM)
    return render(data, sources, style), commented


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
            # a source held as one string (nbformat allows it) stays one string
            lines = text if isinstance(cells[index].get("source"), str) else split_lines(text)
            cells[index] = {**cells[index], "source": lines}
    return style.dump({**data, "cells": cells})


# --- diff ----------------------------------------------------------------------------------

_JSON = json.JSONDecoder()
_JSON_SPACE = re.compile(r"[ \t\n\r]*")


def cell_at_line(text: str) -> Callable[[int], str]:
    """For the notebook file ``text``: line number (1-based) -> ``"cell 3"``, the cell
    whose JSON holds that line, or ``""`` outside the cells or on a line shared by several
    (a notebook written on one line). Diffs name their hunks' cells with it."""
    newlines = [match.start() for match in re.finditer("\n", text)]
    spans = [
        (bisect.bisect_left(newlines, start) + 1, bisect.bisect_left(newlines, end) + 1)
        for start, end in _cell_spans(text)
    ]

    def name(line: int) -> str:
        holders = [number for number, (first, last) in enumerate(spans, 1) if first <= line <= last]
        return f"cell {holders[0]}" if len(holders) == 1 else ""

    return name


def _cell_spans(text: str) -> list[tuple[int, int]]:
    """Where each element of the top-level ``"cells"`` array starts and ends in ``text``;
    ``[]`` when ``text`` is not a JSON object that has one."""
    try:
        position = _skip_space(text, 0)
        if not text.startswith("{", position):
            return []
        position = _skip_space(text, position + 1)
        while text.startswith('"', position):
            key, position = _JSON.raw_decode(text, position)
            position = _skip_space(text, _skip_space(text, position) + 1)  # past ":"
            if key == "cells" and text.startswith("[", position):
                return _array_spans(text, position)
            position = _after_value(text, position)
    except (ValueError, RecursionError):
        pass
    return []


def _array_spans(text: str, position: int) -> list[tuple[int, int]]:
    """The start and end of each element of the JSON array at ``position``."""
    spans = []
    position = _skip_space(text, position + 1)
    while position < len(text) and not text.startswith("]", position):
        _, end = _JSON.raw_decode(text, position)
        spans.append((position, end))
        position = _past_comma(text, end)
    return spans


def _after_value(text: str, position: int) -> int:
    """Past the JSON value at ``position``, its separating comma and white space."""
    _, end = _JSON.raw_decode(text, position)
    return _past_comma(text, end)


def _past_comma(text: str, position: int) -> int:
    """Past the white space and the comma that may follow a JSON value ending there."""
    position = _skip_space(text, position)
    return _skip_space(text, position + 1) if text.startswith(",", position) else position


def _skip_space(text: str, position: int) -> int:
    match = _JSON_SPACE.match(text, position)
    return match.end() if match is not None else position
