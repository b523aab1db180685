"""The language server of ``gradfix lsp`` (pygls), started by :func:`gradfix.lsp.serve`.

What the editor gets, all computed in memory from the buffer (nothing is written):

- diagnostics on open, change and save: one Warning per finding, ``code`` = the rule code,
  ``source`` = ``gradfix``;
- code actions: a quick fix per fix (only that fix applied, sent as minimal text edits),
  ``Suppress GFxxx with a comment`` (``# noqa: GFxxx``) and the source action
  ``source.fixAll.gradfix`` (every safe fix);
- hover over a finding: the rule's documentation;
- the findings of the last ``gradfix trace`` of the file (:mod:`gradfix.trace.remembered`),
  ``source`` = ``gradfix trace`` and marked as from a run, while their line is unchanged.

A buffer that does not parse (a line being typed) keeps the findings of its last text
that did, on the lines unchanged since (a line diff moves them); no fix is offered until
it parses again, since a fix computed on the old text would not apply to the new one.

Jupyter notebooks (LSP 3.17 ``notebookDocument/*``): the Python cells are checked as one
program, as ``gradfix check`` does (:mod:`gradfix.notebook`), and each cell gets its own
diagnostics, quick fixes and fix-all, on its own URI in its own positions. A cell that
does not parse is left out of the program and keeps its last findings, like a buffer.

The engine runs in a worker thread (each buffer text is checked once, whatever asks for
it) and a changed buffer is checked when typing pauses, so the server keeps answering
while a big file is checked.

Settings come from ``initializationOptions`` and the ``gradfix`` section of the workspace
configuration (``{"gradfix": {"select": [...], "ignore": [...], "verify": false}}``; a
flat ``{"select": ...}`` or dotted ``{"gradfix.verify": true}`` works too). With
``verify`` on, every fix of an opened or saved file is executed before and after by the
oracle (:func:`gradfix.proof.verify_fixes`, in a worker thread so the server stays
responsive) and the quick fixes and diagnostics say the verdict.

Finding positions are 1-based code points; LSP positions are 0-based in the encoding the
client negotiated (UTF-16 by default): pygls' position codec converts.
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import gc
import logging
import os
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Coroutine, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from functools import cached_property, partial
from importlib.metadata import version as package_version
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar
from urllib.parse import unquote

import patiencediff
from lsprotocol import types
from pygls.lsp.server import LanguageServer
from pygls.uris import to_fs_path
from pygls.workspace import PositionCodec, TextDocument

from gradfix import pyast
from gradfix.fileio.text import LINE, LINE_BREAK
from gradfix.registry import SelectionError, find_rule, select_rules

# The engine (LibCST, the rules), the notebooks, the oracle (torch) and the configuration
# are imported when first needed (a lint, a verification), so the server starts in a
# fraction of the time (``tests/test_lsp.py`` checks what importing it loads).
if TYPE_CHECKING:
    from gradfix.engine import FileLint, SingleFix, SourceError
    from gradfix.incremental import Snapshot
    from gradfix.notebook import Cell, Program
    from gradfix.proof import FixVerdict
    from gradfix.rule import Finding, Rule

SOURCE = "gradfix"
RUN_SOURCE = "gradfix trace"  # the diagnostics of the last traced run of the file
SECTION = "gradfix"
#: where the editor's ``select`` / ``ignore`` come from, as errors name them
SETTINGS = ("the editor setting gradfix.select", "the editor setting gradfix.ignore")
FIX_ALL_KIND = "source.fixAll.gradfix"
MAX_REASON = 80  # characters of a verdict's reason in a quick fix title
#: seconds without an edit before an incremental lint is checked against a full one
CONFIRM_DELAY = 0.5
#: the notebooks whose cells the client sends: any notebook, its Python cells
NOTEBOOK_SYNC = types.NotebookDocumentSyncOptions(
    notebook_selector=[
        types.NotebookDocumentFilterWithCells(cells=[types.NotebookCellLanguage("python")])
    ],
    save=True,
)
T = TypeVar("T")
logger = logging.getLogger(__name__)


# --- settings ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    select: tuple[str, ...] = ()  # empty: the rules enabled by default
    ignore: tuple[str, ...] = ()
    verify: bool = False


def read_settings(raw: object, base: Settings | None = None) -> Settings:
    """Settings from ``raw`` (nested ``{"gradfix": {...}}``, flat or dotted keys) over ``base``."""
    settings = base or Settings()
    if not isinstance(raw, Mapping):
        return settings
    values = dict(raw.get(SECTION) or {}) if isinstance(raw.get(SECTION), Mapping) else {}
    values.update(raw)
    values.update({k[len(SECTION) + 1 :]: v for k, v in raw.items() if k.startswith(SECTION + ".")})
    if "select" in values:
        settings = replace(settings, select=_codes(values["select"]))
    if "ignore" in values:
        settings = replace(settings, ignore=_codes(values["ignore"]))
    if "verify" in values:
        settings = replace(settings, verify=values["verify"] is True)
    return settings


def _codes(value: object) -> tuple[str, ...]:
    """A list of codes, or one comma-separated string of them."""
    if isinstance(value, str):
        value = value.split(",")
    if not isinstance(value, Iterable):
        return ()
    return tuple(str(code).strip() for code in value if str(code).strip())


# --- positions -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ClientText:
    """A text and the client's position encoding: turns 0-based code point positions into
    LSP positions. Lines end at ``\n``, ``\r\n`` or ``\r`` only (LSP's and LibCST's
    lines, unlike ``str.splitlines``, which also breaks at form feeds)."""

    source: str
    codec: PositionCodec = field(default_factory=PositionCodec)

    @cached_property
    def lines(self) -> list[str]:
        return LINE.findall(self.source)

    def position(self, line: int, character: int) -> types.Position:
        return self.codec.position_to_client_units(self.lines, types.Position(line, character))

    def range(self, start: tuple[int, int], end: tuple[int, int]) -> types.Range:
        return types.Range(self.position(*start), self.position(*end))


def finding_range(finding: Finding, text: ClientText) -> types.Range:
    """The finding's span (1-based lines and columns) in the client's units."""
    return text.range(
        (finding.line - 1, finding.col - 1), (finding.end_line - 1, finding.end_col - 1)
    )


# --- findings as LSP objects ---------------------------------------------------------------


def to_diagnostic(
    finding: Finding, text: ClientText, verdict: FixVerdict | None = None
) -> types.Diagnostic:
    message = finding.message
    if verdict is not None:
        message += f" (fix {verdict_note(verdict)})"
    return types.Diagnostic(
        range=finding_range(finding, text),
        message=message,
        severity=types.DiagnosticSeverity.Warning,
        code=finding.code,
        source=SOURCE,
    )


def run_diagnostics(path: str, text: ClientText) -> list[types.Diagnostic]:
    """The findings of the last ``gradfix trace`` of ``path`` on the lines of ``text`` that
    still hold what the run saw there, each marked as from a run."""
    from gradfix.trace.remembered import remembered

    diagnostics = []
    for finding in remembered(path, text.source):
        line = text.lines[finding.line - 1].rstrip("\r\n")
        start = len(line) - len(line.lstrip())
        step = f", step {finding.step}" if finding.step else ""
        diagnostics.append(
            types.Diagnostic(
                range=text.range((finding.line - 1, start), (finding.line - 1, len(line))),
                message=f"{finding.message} (from a run of `{finding.command}`{step})",
                severity=types.DiagnosticSeverity.Warning,
                code=finding.code,
                source=RUN_SOURCE,
            )
        )
    return diagnostics


def verdict_note(verdict: FixVerdict) -> str:
    """``verified``, or the verdict with the first clause of its reason (a menu title)."""
    if verdict.status == "verified":
        return verdict.status
    reason = verdict.reason.split("; ")[0]
    if len(reason) > MAX_REASON:
        reason = reason[: MAX_REASON - 3].rstrip() + "..."
    return f"{verdict.status}: {reason}"


def syntax_diagnostics(error: SourceError, source: str) -> list[types.Diagnostic]:
    """Nothing for code Python rejects (the Python language server reports it, and it is
    what a buffer looks like while typing); one Error for code Python accepts but gradfix
    cannot parse, so the user knows why the file is not checked."""
    try:
        pyast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    line = max((error.line or 1) - 1, 0)
    span = types.Range(types.Position(line, 0), types.Position(line + 1, 0))
    return [
        types.Diagnostic(
            range=span,
            message=f"gradfix cannot check this file: {error}",
            severity=types.DiagnosticSeverity.Error,
            source=SOURCE,
        )
    ]


def overlaps(a: types.Range, b: types.Range) -> bool:
    """Whether two ranges share a position (touching counts: a cursor at a range's end)."""
    return (a.start.line, a.start.character) <= (b.end.line, b.end.character) and (
        b.start.line,
        b.start.character,
    ) <= (a.end.line, a.end.character)


def noqa_edit(source: str, line: int, code: str) -> tuple[int, str] | None:
    """:func:`gradfix.noqa.noqa_edit`, imported when first needed."""
    from gradfix.noqa import noqa_edit as edit

    return edit(source, line, code)


# --- edits ---------------------------------------------------------------------------------


def text_edits(text: ClientText, new_source: str) -> list[types.TextEdit]:
    """Minimal edits turning ``text`` into ``new_source``: changed line blocks with their
    common leading and trailing characters trimmed."""
    old_lines, new_lines = text.lines, LINE.findall(new_source)
    matcher = difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False)
    edits = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        old, new = "".join(old_lines[i1:i2]), "".join(new_lines[j1:j2])
        prefix, suffix = _common_ends(old, new)
        start = _advance(i1, 0, old[:prefix])
        end = _advance(start[0], start[1], old[prefix : len(old) - suffix])
        edits.append(types.TextEdit(text.range(start, end), new[prefix : len(new) - suffix]))
    return edits


def _common_ends(old: str, new: str) -> tuple[int, int]:
    """The lengths of the common prefix and suffix, never splitting a ``\r\n``."""
    prefix = _common_prefix(old, new)
    if old[prefix - 1 : prefix] == "\r":
        prefix -= 1
    suffix = _common_prefix(old[prefix:][::-1], new[prefix:][::-1])
    old_at, new_at = len(old) - suffix, len(new) - suffix
    if (
        suffix
        and old[old_at] == "\n"
        and "\r" in (old[old_at - 1 : old_at], new[new_at - 1 : new_at])
    ):
        suffix -= 1
    return prefix, suffix


def _common_prefix(a: str, b: str) -> int:
    length = 0
    for x, y in zip(a, b):
        if x != y:
            break
        length += 1
    return length


def _advance(line: int, character: int, text: str) -> tuple[int, int]:
    """The (line, code point) reached from (line, character) after ``text``."""
    *passed, last = LINE_BREAK.split(text)
    if not passed:
        return line, character + len(last)
    return line + len(passed), len(last)


def workspace_edit(uri: str, edits: list[types.TextEdit]) -> types.WorkspaceEdit:
    return types.WorkspaceEdit(changes={uri: edits})


# --- findings kept while a buffer does not parse -------------------------------------------


def carried(findings: Iterable[Finding], old: str, new: str) -> list[Finding]:
    """The findings of the text ``old`` whose lines are all unchanged in ``new``, moved to
    their lines there: lines inserted or deleted above shift a finding, a changed line
    drops it (a line diff, so a finding never lands on code it was not found in)."""
    moved = _moved_lines(old, new)
    kept = []
    for finding in findings:
        span = range(finding.line, finding.end_line + 1)
        if all(line in moved for line in span) and (
            moved[finding.end_line] - moved[finding.line] == finding.end_line - finding.line
        ):
            line = moved[finding.line]
            kept.append(replace(finding, line=line, end_line=line + len(span) - 1))
    return kept


def _moved_lines(old: str, new: str) -> dict[int, int]:
    """1-based line of ``old`` -> its line in ``new``, for the lines the diff keeps
    (compared without their line breaks: typing after the last line adds one)."""
    old_lines = [LINE_BREAK.sub("", line) for line in LINE.findall(old)]
    new_lines = [LINE_BREAK.sub("", line) for line in LINE.findall(new)]
    matcher = patiencediff.PatienceSequenceMatcher(None, old_lines, new_lines)
    moved = {}
    for tag, i1, i2, j1, _ in matcher.get_opcodes():
        if tag == "equal":
            moved.update({i1 + offset + 1: j1 + offset + 1 for offset in range(i2 - i1)})
    return moved


# --- the server ----------------------------------------------------------------------------


class DocumentLint(ABC):
    """What the code actions and hover need of a checked document: a buffer, or a cell of
    a notebook. Positions are the document's own."""

    uri: str
    text: ClientText
    findings: list[Finding]
    #: whether its fixes can be verified (a notebook is not executed)
    verifiable: ClassVar[bool] = True

    @property
    def source(self) -> str:
        return self.text.source

    def findings_at(self, span: types.Range) -> list[Finding]:
        return [f for f in self.findings if overlaps(finding_range(f, self.text), span)]

    @abstractmethod
    def singles(self) -> list[SingleFix]:
        """Each fix applied alone (safe and unsafe), findings in the document's positions."""

    @abstractmethod
    def fix_edit(self, single: SingleFix) -> types.WorkspaceEdit | None:
        """The edit applying one of :meth:`singles`; ``None`` when it cannot be applied."""

    @abstractmethod
    def fix_all_edit(self) -> types.WorkspaceEdit | None:
        """The edit applying every safe fix; ``None`` when there is none."""

    @abstractmethod
    def noqa_at(self, finding: Finding) -> tuple[int, str] | None:
        """Where and what to insert to suppress ``finding`` (see :func:`noqa_edit`)."""


@dataclass
class BufferLint(DocumentLint):
    """What gradfix says about one text of a buffer; fixes are computed on first request
    (code actions come on every cursor move: each text is linted and fixed once).

    After an edit of a text that was linted, only what the edit can change is checked
    again (:mod:`gradfix.incremental`): the findings come at once, and the whole text is
    linted when a fix is asked for or typing pauses (:meth:`confirm`)."""

    uri: str
    text: ClientText
    path: str
    rules: Sequence[type[Rule]]
    findings: list[Finding] = field(default_factory=list)
    error: SourceError | None = None
    snapshot: Snapshot | None = None  # what the next edit's lint starts from
    incremental: bool = False  # the findings come from :func:`relint`, not yet confirmed
    _lint: FileLint | None = None  # the one lint: quick fixes and fix-all reuse its parse
    _singles: list[SingleFix] | None = None
    _fixed_safe: str | None = None
    freeze: ClassVar[bool] = False  # freeze a full lint's objects (:meth:`full_lint`)

    @classmethod
    def of(
        cls,
        uri: str,
        text: ClientText,
        path: str,
        rules: Sequence[type[Rule]],
        previous: Snapshot | None = None,
    ) -> BufferLint:
        """The lint of ``text``; after ``previous`` (the buffer's last lint, with the same
        rules), only the part the edit can change is checked again."""
        if previous is not None and previous.rules == tuple(rules) and previous.path == path:
            from gradfix.incremental import relint

            try:
                snapshot = relint(previous, text.source)
            except Exception:  # a bug in the incremental lint: the full one is right
                logger.exception("checking %s again failed", path)
                snapshot = None
            if snapshot is not None:
                return cls(uri, text, path, rules, list(snapshot.findings), None, snapshot, True)
        lint = cls(uri, text, path, rules)
        lint.full_lint()
        return lint

    def full_lint(self) -> FileLint | None:
        """The lint of the whole text (made once); ``None`` when it does not parse. An
        incremental lint takes its findings (the same when it was exact, else they may
        differ where the edit's links did not fit its budget: :mod:`gradfix.incremental`)."""
        if self._lint is not None or self.error is not None:
            return self._lint
        from gradfix.engine import FileLint, SourceError
        from gradfix.incremental import Snapshot

        # A full lint's tree, analysis and snapshot live until the next full lint: frozen
        # (gc.freeze), the cyclic collector does not walk their millions of objects again
        # and again after each edit (a 0.2-0.3 s pause every few edits of a 5,000-line
        # file); the next full lint unfreezes them (their cycles, if any, are collected).
        # Only in the server's process (:func:`run`): freezing is for the whole process.
        if BufferLint.freeze:
            gc.unfreeze()
        try:
            self._lint = FileLint(self.source, rules=self.rules, path=self.path, lazy_fixes=True)
        except SourceError as error:
            self.error = error
            return None
        except Exception:  # a bug in the engine: no findings, the server goes on
            logger.exception("checking %s failed", self.path)
            return None
        self.findings = self._lint.findings  # a rule that raised: the others' findings
        for crash in self._lint.crashes:
            logger.error("%s: %s\n%s", self.path, crash.line(), crash.traceback)
        tree = self._lint.tree
        self.snapshot = (
            None
            if tree is None or self._lint.crashes
            else Snapshot.of(self.source, tree, self.findings, self.rules, self.path)
        )
        if BufferLint.freeze:
            gc.freeze()
        return self._lint

    def confirm(self) -> bool:
        """Lint the whole text of an incremental lint; whether its findings differ."""
        if not self.incremental:
            return False
        self.incremental = False
        exact = self.snapshot is not None and self.snapshot.exact
        before = [_published(f) for f in self.findings]
        self.full_lint()
        if self.error is not None:
            return True
        changed = [_published(f) for f in self.findings] != before
        if changed and exact:  # the links missed a dependency: a bug of the links
            logger.warning("%s: the incremental lint missed a change; published again", self.path)
        return changed

    def singles(self) -> list[SingleFix]:
        if self._singles is None:
            self._singles = []
            self.confirm()
            if self._lint is not None and any(f.fix for f in self.findings):
                try:
                    self._singles = self._lint.singles()
                except Exception:  # a bug in a fix: no quick fixes, the server goes on
                    logger.exception("fixing %s failed", self.path)
        return self._singles

    def fix_edit(self, single: SingleFix) -> types.WorkspaceEdit | None:
        if single.source is None:
            return None
        return workspace_edit(self.uri, text_edits(self.text, single.source))

    def fixed_safe(self) -> str:
        """The source with every safe fix applied (the source itself when there is none)."""
        if self._fixed_safe is None:
            self._fixed_safe = self.source
            self.confirm()
            if self._lint is not None and any(f.fix for f in self.findings):
                try:
                    self._fixed_safe = self._lint.fixed().source
                except Exception:  # a bug in a fix: no fix-all action, the server goes on
                    logger.exception("fixing %s failed", self.path)
        return self._fixed_safe

    def fix_all_edit(self) -> types.WorkspaceEdit | None:
        if self.fixed_safe() == self.source:
            return None
        return workspace_edit(self.uri, text_edits(self.text, self.fixed_safe()))

    def noqa_at(self, finding: Finding) -> tuple[int, str] | None:
        return noqa_edit(self.source, finding.line, finding.code)


@dataclass
class NotebookCheck:
    """One state of a notebook: its Python cells checked as one program (the marker and
    placeholder scheme of :mod:`gradfix.notebook`), findings located in their cells."""

    uri: str
    #: every cell's URI, in the notebook's order (a cell's index is its place here)
    cell_uris: list[str]
    #: the text of each Python code cell, by URI
    texts: dict[str, ClientText]
    path: str
    rules: Sequence[type[Rule]]
    #: what was checked (:func:`cells_key`): a later state of the notebook is another check
    key: tuple[tuple[str, str | None], ...] = ()
    program: Program = field(default_factory=lambda: _program(()))
    #: findings with ``cell`` = index + 1 and lines counted in the cell
    findings: list[Finding] = field(default_factory=list)
    #: cell URI -> why the cell is not in the program (it does not parse)
    broken: dict[str, str] = field(default_factory=dict)
    _lint: FileLint | None = None  # the program's one lint: quick fixes and fix-all reuse it
    _singles: list[SingleFix] | None = None
    _fixed_safe: dict[int, types.WorkspaceEdit | None] = field(default_factory=dict)

    @classmethod
    def of(
        cls,
        uri: str,
        cells: Sequence[tuple[str, ClientText | None]],
        path: str,
        rules: Sequence[type[Rule]],
    ) -> NotebookCheck:
        """``cells``: each cell's URI and text, ``None`` for a cell that is not Python."""
        texts = {cell_uri: text for cell_uri, text in cells if text is not None}
        from gradfix.engine import FileLint, SourceError
        from gradfix.notebook import locate

        check = cls(uri, [cell_uri for cell_uri, _ in cells], texts, path, rules, cells_key(cells))
        check.program = _program(tuple(check._program_cells()))
        if not check.program.cells:
            return check
        source = check.program.source
        try:
            check._lint = FileLint(source, rules=rules, path=path, lazy_fixes=True)
            found = check._lint.findings
        except SourceError as error:  # Python accepts it, LibCST does not
            why = f"the cells as one program: {error}"  # its line is the program's
            check.broken = {check.cell_uris[c.index]: why for c in check.program.cells}
            return check
        except Exception:  # a bug in a rule: no findings, the server goes on
            logger.exception("checking %s failed", path)
            return check
        check.findings = [locate(finding, source) for finding in found]
        return check

    def _program_cells(self) -> Iterator[Cell]:
        """The cells that go into the program; those that do not parse go into ``broken``."""
        from gradfix.notebook import NotebookError, code_cell

        for index, cell_uri in enumerate(self.cell_uris):
            text = self.texts.get(cell_uri)
            if text is None:
                continue
            try:
                cell = code_cell(index, text.source)
            except NotebookError as error:
                self.broken[cell_uri] = str(error)
                continue
            if cell is not None:  # None: a cell magic that is not Python (%%bash)
                yield cell

    def cell(self, uri: str) -> CellLint | None:
        """The view of one Python cell, ``None`` for any other URI."""
        text = self.texts.get(uri)
        if text is None:
            return None
        number = self.cell_uris.index(uri) + 1
        return CellLint(uri, text, [f for f in self.findings if f.cell == number], self, number)

    def singles(self) -> list[SingleFix]:
        """Each fix of the program applied alone, findings located in their cells (the
        source stays the fixed program's: :meth:`edit` maps it back)."""
        if self._singles is None:
            self._singles = []
            if self._lint is not None and any(f.fix for f in self.findings):
                from gradfix.notebook import locate

                source = self.program.source
                try:
                    singles = self._lint.singles()
                except Exception:  # a bug in a fix: no quick fixes, the server goes on
                    logger.exception("fixing %s failed", self.path)
                    singles = []
                self._singles = [
                    replace(single, findings=[locate(f, source) for f in single.findings])
                    for single in singles
                ]
        return self._singles

    def edit(self, fixed: str) -> types.WorkspaceEdit | None:
        """The edit of the cells turning the program into ``fixed``; ``None`` when a cell
        does not map back (a fix that moves code across cells)."""
        cells = self.program.split(fixed)
        if cells is None:
            return None
        changes = {}
        for index, new_text in cells.items():
            uri = self.cell_uris[index]
            if new_text != self.texts[uri].source:
                changes[uri] = text_edits(self.texts[uri], new_text)
        return types.WorkspaceEdit(changes=changes) if changes else None

    def fix_all_edit(self, number: int) -> types.WorkspaceEdit | None:
        """Every safe fix of cell ``number``'s findings but those that would move code
        across cells, in one pass."""
        if number not in self._fixed_safe:
            from gradfix.notebook import locate

            source = self.program.source
            wanted = {
                _cell_key(finding)
                for single in self.singles()
                if single.safety == "safe"
                and single.source is not None
                and self.edit(single.source) is not None
                for finding in single.findings
                if finding.cell == number
            }
            self._fixed_safe[number] = None
            if wanted and self._lint is not None:
                try:
                    fixed = self._lint.fixed(
                        keep=lambda finding: _cell_key(locate(finding, source)) in wanted
                    )
                    self._fixed_safe[number] = self.edit(fixed.source)
                except Exception:  # a bug in a fix: no fix-all action, the server goes on
                    logger.exception("fixing %s failed", self.path)
        return self._fixed_safe[number]


def _program(cells: tuple[Cell, ...]) -> Program:
    from gradfix.notebook import Program

    return Program(cells)


def _finding_key(finding: Finding) -> tuple[int, int, str]:
    """:func:`gradfix.proof.finding_key` (the oracle is imported when first needed)."""
    from gradfix.proof import finding_key

    return finding_key(finding)


def cells_key(
    cells: Sequence[tuple[str, ClientText | None]],
) -> tuple[tuple[str, str | None], ...]:
    """The cells' URIs and Python texts: what a notebook's check depends on."""
    return tuple((uri, None if text is None else text.source) for uri, text in cells)


def _cell_key(finding: Finding) -> tuple[int | None, int, int, str]:
    return (finding.cell, finding.line, finding.col, finding.code)


@dataclass
class CellLint(DocumentLint):
    """One Python cell of a checked notebook: its findings, and fixes as edits of the cells
    (a fix may add an import to the first cell)."""

    uri: str
    text: ClientText
    findings: list[Finding]
    notebook: NotebookCheck
    number: int  # the cell's index + 1, as the findings' ``cell``
    verifiable: ClassVar[bool] = False

    def singles(self) -> list[SingleFix]:
        return [
            replace(single, findings=hit)
            for single in self.notebook.singles()
            if (hit := [f for f in single.findings if f.cell == self.number])
        ]

    def fix_edit(self, single: SingleFix) -> types.WorkspaceEdit | None:
        return None if single.source is None else self.notebook.edit(single.source)

    def fix_all_edit(self) -> types.WorkspaceEdit | None:
        return self.notebook.fix_all_edit(self.number)

    def noqa_at(self, finding: Finding) -> tuple[int, str] | None:
        # the cell as the program holds it: the same lines, IPython ones as placeholders
        # (which the tokenizer reads; ``!ls`` it may not)
        cell = next(c for c in self.notebook.program.cells if c.index == self.number - 1)
        return noqa_edit(cell.text, finding.line, finding.code)


@dataclass
class VerificationState:
    """Verdicts of the fixes of one buffer text (keyed like ``fix --verify``)."""

    source: str
    verdicts: dict[tuple[int, int, str], FixVerdict] = field(default_factory=dict)
    done: bool = False
    error: str | None = None


class GradfixServer(LanguageServer):
    """The engine's work (lint, fixes) runs in one worker thread, so the event loop keeps
    reading messages while a big file is checked; verification runs in threads of its own."""

    def __init__(self) -> None:
        super().__init__(
            "gradfix",
            _version(),
            text_document_sync_kind=types.TextDocumentSyncKind.Full,
            notebook_document_sync=NOTEBOOK_SYNC,
        )
        self.settings = Settings()
        self._rules: list[type[Rule]] | None = None  # the default rules, when first needed
        #: per buffer: the text and its lint (a future: awaited by every request on it)
        self.buffers: dict[str, tuple[Any, asyncio.Future[BufferLint]]] = {}
        #: per notebook: its cells' texts and their check
        self.notebooks: dict[str, tuple[Any, asyncio.Future[NotebookCheck]]] = {}
        #: per buffer or cell: its last text that parsed and the findings there
        self.last_good: dict[str, tuple[str, list[Finding]]] = {}
        #: per buffer: the last lint's snapshot, where the next edit's lint starts
        self.snapshots: dict[str, Snapshot] = {}
        self.broken: set[str] = set()  # the buffers and cells that do not parse now
        self.verification: dict[str, VerificationState] = {}
        self.linting: set[str] = set()  # the buffers and notebooks being linted after a change
        self.changed_again: set[str] = set()  # ... and changed again meanwhile
        self.tasks: set[asyncio.Future[None]] = set()
        self.engine = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gradfix-engine")
        self.verify_lock = threading.Lock()
        self.verify_threads: list[threading.Thread] = []
        self.shutdown_requested = False
        self.last_config_error: str | None = None

    # settings

    @property
    def rules(self) -> list[type[Rule]]:
        """The rules of the editor's settings (the default rules are imported when first
        needed: a lint)."""
        if self._rules is None:
            self._rules = select_rules()
        return self._rules

    @rules.setter
    def rules(self, rules: list[type[Rule]]) -> None:
        self._rules = rules

    def apply_settings(self, settings: Settings) -> None:
        """Use ``settings`` from now on and lint every open buffer again."""
        if settings == self.settings:
            return
        self.settings = settings
        try:
            self.rules = select_rules(settings.select or None, settings.ignore, None, SETTINGS)
        except SelectionError as error:
            self.rules = select_rules()
            self.settings = replace(settings, select=(), ignore=())
            self.notify(f"gradfix: {error}; using the default rules")
        from gradfix.proof import torch_available

        if settings.verify and not torch_available():
            self.settings = replace(settings, verify=False)
            self.notify("gradfix: verification needs torch in the server's Python; it is off")
        self.buffers.clear()
        self.notebooks.clear()
        self.verification.clear()
        self.last_good.clear()  # findings of other rules
        self.snapshots.clear()
        for document in list(self.workspace.text_documents.values()):
            if self.workspace.get_notebook_document(cell_uri=document.uri) is None:
                self.spawn(self.lint(document.uri, verify=True))
        for notebook in list(self.workspace.notebook_documents.values()):
            self.spawn(self.lint(notebook.uri, verify=False))

    def rules_for(self, path: str) -> list[type[Rule]]:
        """The project's ``[tool.gradfix]`` (nearest to the file) with the editor's
        ``select`` / ``ignore`` on top; a bad configuration falls back to the settings."""
        from gradfix.config import ConfigError, find_config, load_config, resolve_rules

        try:
            config = load_config(find_config(os.path.dirname(os.path.abspath(path))))
            return resolve_rules(
                config, self.settings.select or None, self.settings.ignore, path=path
            )
        except (ConfigError, SelectionError) as error:
            message = f"gradfix: {error}; using the editor settings"
            if message != self.last_config_error:
                self.last_config_error = message
                self.notify(message)
            return list(self.rules)

    def notify(self, message: str) -> None:
        self.window_show_message(
            types.ShowMessageParams(type=types.MessageType.Warning, message=message)
        )

    # linting

    def spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coroutine)
        self.tasks.add(task)  # a task nobody references may be garbage-collected
        task.add_done_callback(self.tasks.discard)

    def in_engine(self, function: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        return asyncio.get_running_loop().run_in_executor(self.engine, partial(function, *args))

    def open_document(self, uri: str) -> TextDocument | None:
        """The open buffer or notebook cell (pygls would read a closed file from disk); pygls
        keys them by unquoted URI (a cell's ``#W0sZmlsZQ%3D%3D``, a file's ``%20``)."""
        return self.workspace.text_documents.get(unquote(uri))

    def computed(
        self,
        cache: dict[str, tuple[Any, asyncio.Future[T]]],
        uri: str,
        key: Any,
        start: Callable[[], asyncio.Future[T]],
    ) -> asyncio.Future[T]:
        """``cache[uri]``'s result if it was started for ``key``, else ``start()``'s."""
        entry = cache.get(uri)
        if entry is None or entry[0] != key:
            entry = cache[uri] = (key, start())
        # shielded: a cancelled request must not cancel the lint other requests wait for
        return asyncio.shield(entry[1])

    async def buffer(self, document: TextDocument) -> BufferLint:
        """The lint of the buffer's current text, computed once per text and settings
        (after an edit, from the last lint: :mod:`gradfix.incremental`)."""
        text = ClientText(document.source, document.position_codec)
        uri = document.uri

        def start() -> asyncio.Future[BufferLint]:
            path = _path(document)
            previous = self.snapshots.get(uri)
            return self.in_engine(BufferLint.of, uri, text, path, self.rules_for(path), previous)

        lint = await self.computed(self.buffers, uri, text.source, start)
        if lint.snapshot is not None:
            self.snapshots[uri] = lint.snapshot
        return lint

    async def confirm_soon(self, uri: str, lint: BufferLint, version: int | None) -> None:
        """Once typing pauses, lint the whole text of an incremental lint (the quick fixes
        need it) and publish again if the findings differ. Typing has paused when the
        buffer is still at ``version``: an edit meanwhile that came back to the same text
        (an undo) is typing too."""
        await asyncio.sleep(CONFIRM_DELAY)
        document = self.open_document(uri)
        if document is None or document.version != version or not lint.incremental:
            return  # changed meanwhile (its own lint confirms), closed, or confirmed
        published = self.last_good.get(uri, ("", []))[1]
        await self.in_engine(lint.confirm)
        if lint.snapshot is not None:
            self.snapshots[uri] = lint.snapshot
        if [_published(f) for f in lint.findings] != [_published(f) for f in published]:
            await self.lint(uri, verify=False)

    def notebook_cells(
        self, notebook: types.NotebookDocument
    ) -> list[tuple[str, ClientText | None]]:
        """Each cell's URI and, for a Python code cell, its text."""
        cells: list[tuple[str, ClientText | None]] = []
        for cell in notebook.cells:
            document = self.open_document(cell.document)
            python = cell.kind == types.NotebookCellKind.Code and document is not None
            if document is not None and python and document.language_id in (None, "python"):
                cells.append((cell.document, ClientText(document.source, document.position_codec)))
            else:
                cells.append((cell.document, None))
        return cells

    async def notebook_check(self, notebook: types.NotebookDocument) -> NotebookCheck:
        """The check of the notebook's current cells, computed once per texts and settings."""
        cells = self.notebook_cells(notebook)

        def start() -> asyncio.Future[NotebookCheck]:
            path = _notebook_path(notebook)
            return self.in_engine(NotebookCheck.of, notebook.uri, cells, path, self.rules_for(path))

        return await self.computed(self.notebooks, notebook.uri, cells_key(cells), start)

    async def document_lint(self, uri: str) -> DocumentLint | None:
        """The lint of an open buffer or notebook cell (what requests on it need)."""
        notebook = self.workspace.get_notebook_document(cell_uri=uri)
        if notebook is not None:
            return (await self.notebook_check(notebook)).cell(uri)
        document = self.open_document(uri)
        return None if document is None else await self.buffer(document)

    def lint_soon(self, uri: str) -> None:
        """Lint a changed buffer or notebook now, or, when a lint of it is running, once
        more right after it: one lint at a time per document, the changes that arrive
        meanwhile checked together, and no fixed delay before the diagnostics."""
        if uri in self.linting:
            self.changed_again.add(uri)
            return
        self.linting.add(uri)
        self.spawn(self.lint_until_current(uri))

    async def lint_until_current(self, uri: str) -> None:
        try:
            while True:
                self.changed_again.discard(uri)
                await self.lint(uri, verify=False)  # publishes only if still current
                if uri not in self.changed_again:
                    return
        finally:
            self.linting.discard(uri)

    async def lint(self, uri: str, *, verify: bool) -> None:
        """Publish the buffer's (or notebook's) diagnostics; with ``verify``, start
        verifying the buffer's fixes."""
        notebook = self.workspace.get_notebook_document(notebook_uri=uri)
        if notebook is not None:
            await self.lint_notebook(notebook)
            return
        document = self.open_document(uri)
        if document is None:
            return
        lint = await self.buffer(document)
        if self.open_document(uri) is not document or document.source != lint.source:
            return  # closed or changed meanwhile: the next lint publishes
        if lint.error is not None:
            unchecked = syntax_diagnostics(lint.error, lint.source)
            kept = self.kept(uri, lint.text, lint.path, lint.error)
            self.publish(document, unchecked + kept + run_diagnostics(lint.path, lint.text))
            return
        self.publish_lint(document, lint)
        if isinstance(lint, BufferLint) and lint.incremental:
            self.spawn(self.confirm_soon(uri, lint, document.version))
        if verify and self.settings.verify and any(f.fix is not None for f in lint.findings):
            self.start_verification(document)

    async def lint_notebook(self, notebook: types.NotebookDocument) -> None:
        """Publish the diagnostics of each cell of the notebook."""
        check = await self.notebook_check(notebook)
        if cells_key(self.notebook_cells(notebook)) != check.key:
            return  # changed meanwhile: the next lint publishes
        for uri in check.cell_uris:
            document, lint = self.open_document(uri), check.cell(uri)
            if document is None:
                continue
            if lint is None:  # markdown, another language
                self.publish(document, [])
            elif uri in check.broken:
                self.publish(document, self.kept(uri, lint.text, check.path, check.broken[uri]))
            else:
                self.publish_lint(document, lint)

    def publish_lint(self, document: TextDocument, lint: DocumentLint) -> None:
        """Publish the findings of a text that parsed, and remember them for when it does
        not (:meth:`kept`)."""
        self.last_good[document.uri] = (lint.source, lint.findings)
        self.broken.discard(document.uri)
        ran = run_diagnostics(lint.path, lint.text) if isinstance(lint, BufferLint) else []
        self.publish(document, [self.diagnostic(lint, f) for f in lint.findings] + ran)

    def kept(self, uri: str, text: ClientText, path: str, error: object) -> list[types.Diagnostic]:
        """For a buffer or cell that does not parse (a line being typed): the findings of
        its last text that parsed, on the lines unchanged since. A log line says why, once
        until it parses again."""
        if uri not in self.broken:
            self.broken.add(uri)
            self.window_log_message(
                types.LogMessageParams(
                    type=types.MessageType.Info,
                    message=f"gradfix: {path}: {error}; findings kept on the lines unchanged "
                    "since it last parsed, no quick fixes until it parses",
                )
            )
        source, findings = self.last_good.get(uri, ("", []))
        return [to_diagnostic(finding, text) for finding in carried(findings, source, text.source)]

    def publish(self, document: TextDocument, diagnostics: list[types.Diagnostic]) -> None:
        self.text_document_publish_diagnostics(
            types.PublishDiagnosticsParams(
                uri=document.uri, version=document.version, diagnostics=diagnostics
            )
        )

    def forget(self, uri: str) -> None:
        """A closed buffer, cell or notebook: no pending lint, no cache, no diagnostics."""
        self.changed_again.discard(uri)  # a lint running ends without publishing
        caches = (self.buffers, self.notebooks, self.verification, self.last_good, self.snapshots)
        for cache in caches:
            cache.pop(uri, None)
        self.broken.discard(uri)
        self.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri, []))

    # verification

    def start_verification(self, document: TextDocument) -> None:
        """Verify the buffer's fixes in a worker thread; the verdicts arrive on the event
        loop (:meth:`finish_verification`). ``exit`` does not wait for it (:func:`serve`)."""
        source, uri = document.source, document.uri
        state = self.verification.get(uri)
        if self.shutdown_requested or (state is not None and state.source == source):
            return  # running or done for this text
        self.verification[uri] = state = VerificationState(source)
        path, loop = _path(document), asyncio.get_running_loop()
        rules = self.rules_for(path)

        def verify() -> None:
            from gradfix.proof import finding_key, verify_fixes

            with self.verify_lock:  # one at a time: each runs two processes already
                if self.verification.get(uri) is not state:
                    return  # the buffer changed while this one waited
                try:
                    state.verdicts = {
                        finding_key(v.finding): v for v in verify_fixes(path, source, rules=rules)
                    }
                except Exception as error:  # a crash of the oracle: no verdicts
                    state.error = f"{type(error).__name__}: {error}"
                    logger.exception("verification of %s failed", path)
            state.done = True
            with contextlib.suppress(RuntimeError):  # the loop is closed: the server exited
                loop.call_soon_threadsafe(self.finish_verification, uri, state)

        thread = threading.Thread(target=verify, name="gradfix-verify", daemon=True)
        self.verify_threads = [t for t in self.verify_threads if t.is_alive()] + [thread]
        thread.start()

    def finish_verification(self, uri: str, state: VerificationState) -> None:
        if self.verification.get(uri) is state:
            self.spawn(self.lint(uri, verify=False))  # republish with the verdicts

    def diagnostic(self, lint: DocumentLint, finding: Finding) -> types.Diagnostic:
        """The finding as published: with the verdict on its fix once there is one."""
        state = self.verification.get(lint.uri)
        verdict = None
        if state is not None and state.source == lint.source:
            verdict = state.verdicts.get(_finding_key(finding))
        return to_diagnostic(finding, lint.text, verdict)

    def verdict_title(self, lint: DocumentLint, finding: Finding) -> str:
        """`` (verified)`` and the like for a quick fix title; ``""`` without verification."""
        if not self.settings.verify or not lint.verifiable:
            return ""
        state = self.verification.get(lint.uri)
        if state is None or state.source != lint.source:
            return " (not verified: save the file to verify)"
        if not state.done:
            return " (verifying...)"
        if state.error is not None:
            return " (not verified: the verifier failed)"
        verdict = state.verdicts.get(_finding_key(finding))
        if verdict is None:
            return " (not verified)"
        return f" ({verdict_note(verdict)})"

    # code actions and hover (run in the engine thread: fixes take a while on big files)

    def code_actions(
        self, lint: DocumentLint, wanted: types.Range, only: Sequence[str] | None
    ) -> list[types.CodeAction]:
        in_range = lint.findings_at(wanted)
        actions: list[types.CodeAction] = []
        if _wants(only, types.CodeActionKind.QuickFix) and in_range:
            actions += self.quick_fixes(lint, wanted)
            suppress = (suppress_action(lint, f, self.diagnostic(lint, f)) for f in in_range)
            actions += [action for action in suppress if action is not None]
        fix_all = lint.fix_all_edit() if _wants(only, FIX_ALL_KIND) else None
        if fix_all is not None:
            actions.append(
                types.CodeAction(
                    title="Fix all gradfix (safe fixes)", kind=FIX_ALL_KIND, edit=fix_all
                )
            )
        return actions

    def quick_fixes(self, lint: DocumentLint, wanted: types.Range) -> list[types.CodeAction]:
        actions = []
        for single in lint.singles():
            hit = [f for f in single.findings if overlaps(finding_range(f, lint.text), wanted)]
            edit = lint.fix_edit(single) if hit else None
            if edit is None:
                continue
            first = hit[0]
            safety = " (unsafe)" if single.safety == "unsafe" else ""
            verdict = self.verdict_title(lint, first)
            actions.append(
                types.CodeAction(
                    title=f"Fix {first.code}: {single.description}{safety}{verdict}",
                    kind=types.CodeActionKind.QuickFix,
                    diagnostics=[self.diagnostic(lint, f) for f in hit],
                    is_preferred=single.safety == "safe" and "rejected" not in verdict,
                    edit=edit,
                )
            )
        return actions


def hover_docs(lint: DocumentLint, position: types.Position) -> types.Hover | None:
    """The docs of the rules whose findings cover ``position``."""
    hits = lint.findings_at(types.Range(position, position))
    if not hits:
        return None
    sections = []
    for code in dict.fromkeys(f.code for f in hits):
        rule = find_rule(code)
        sections.append(f"### {rule.code} {rule.name}\n\n{rule.docs()}")
    return types.Hover(
        contents=types.MarkupContent(
            kind=types.MarkupKind.Markdown, value="\n\n---\n\n".join(sections)
        ),
        range=finding_range(hits[0], lint.text),
    )


def suppress_action(
    lint: DocumentLint, finding: Finding, diagnostic: types.Diagnostic
) -> types.CodeAction | None:
    insertion = lint.noqa_at(finding)
    if insertion is None:
        return None
    column, comment = insertion
    at = lint.text.position(finding.line - 1, column)
    return types.CodeAction(
        title=f"Suppress {finding.code} with a comment",
        kind=types.CodeActionKind.QuickFix,
        diagnostics=[diagnostic],
        edit=workspace_edit(lint.uri, [types.TextEdit(types.Range(at, at), comment)]),
    )


def _published(finding: Finding) -> tuple[object, ...]:
    """What a diagnostic shows of a finding (``Finding`` equality ignores the message)."""
    return (
        finding.line,
        finding.col,
        finding.end_line,
        finding.end_col,
        finding.code,
        finding.message,
        finding.fix,
    )


def _wants(only: Sequence[str] | None, kind: str) -> bool:
    """LSP kinds are hierarchical: ``source.fixAll`` asks for ``source.fixAll.gradfix``."""
    return not only or any(kind == k or kind.startswith(k + ".") for k in only)


def _path(document: TextDocument) -> str:
    return document.path or document.filename or "<buffer>.py"


def _notebook_path(notebook: types.NotebookDocument) -> str:
    return to_fs_path(notebook.uri) or "<notebook>.ipynb"


def _version() -> str:
    try:
        return package_version("gradfix")
    except Exception:  # running from a checkout without metadata
        return "0"


# --- protocol handlers ---------------------------------------------------------------------


def create_server() -> GradfixServer:
    """The server with every feature registered (not started)."""
    server = GradfixServer()

    @server.feature(types.INITIALIZE)
    def initialize(ls: GradfixServer, params: types.InitializeParams) -> None:
        ls.apply_settings(read_settings(params.initialization_options))

    @server.feature(types.INITIALIZED)
    async def initialized(ls: GradfixServer, params: types.InitializedParams) -> None:
        ls.apply_settings(await pull_settings(ls, ls.settings))

    @server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
    async def did_change_configuration(
        ls: GradfixServer, params: types.DidChangeConfigurationParams
    ) -> None:
        pushed = read_settings(params.settings, ls.settings)
        ls.apply_settings(await pull_settings(ls, pushed))

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    async def did_open(ls: GradfixServer, params: types.DidOpenTextDocumentParams) -> None:
        await ls.lint(params.text_document.uri, verify=True)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: GradfixServer, params: types.DidChangeTextDocumentParams) -> None:
        ls.lint_soon(params.text_document.uri)  # never verified: that executes code

    @server.feature(types.TEXT_DOCUMENT_DID_SAVE, types.SaveOptions(include_text=False))
    async def did_save(ls: GradfixServer, params: types.DidSaveTextDocumentParams) -> None:
        await ls.lint(params.text_document.uri, verify=True)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: GradfixServer, params: types.DidCloseTextDocumentParams) -> None:
        ls.forget(params.text_document.uri)

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_OPEN)
    async def notebook_did_open(
        ls: GradfixServer, params: types.DidOpenNotebookDocumentParams
    ) -> None:
        await ls.lint(params.notebook_document.uri, verify=False)  # notebooks are not run

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_CHANGE)
    def notebook_did_change(
        ls: GradfixServer, params: types.DidChangeNotebookDocumentParams
    ) -> None:
        structure = params.change.cells.structure if params.change.cells else None
        for closed in (structure.did_close or []) if structure else []:
            ls.forget(closed.uri)  # a deleted cell
        ls.lint_soon(params.notebook_document.uri)

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_SAVE)
    async def notebook_did_save(
        ls: GradfixServer, params: types.DidSaveNotebookDocumentParams
    ) -> None:
        await ls.lint(params.notebook_document.uri, verify=False)

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_CLOSE)
    def notebook_did_close(ls: GradfixServer, params: types.DidCloseNotebookDocumentParams) -> None:
        ls.forget(params.notebook_document.uri)
        for cell in params.cell_text_documents:
            ls.forget(cell.uri)

    @server.feature(
        types.TEXT_DOCUMENT_CODE_ACTION,
        types.CodeActionOptions(code_action_kinds=[types.CodeActionKind.QuickFix, FIX_ALL_KIND]),
    )
    async def code_action(
        ls: GradfixServer, params: types.CodeActionParams
    ) -> list[types.CodeAction]:
        lint = await ls.document_lint(params.text_document.uri)
        if lint is None:
            return []
        return await ls.in_engine(ls.code_actions, lint, params.range, params.context.only)

    @server.feature(types.TEXT_DOCUMENT_HOVER)
    async def hover(ls: GradfixServer, params: types.HoverParams) -> types.Hover | None:
        lint = await ls.document_lint(params.text_document.uri)
        return None if lint is None else hover_docs(lint, params.position)

    @server.feature(types.SHUTDOWN)
    def shutdown(ls: GradfixServer, params: Any) -> None:
        ls.shutdown_requested = True
        ls.engine.shutdown(wait=False, cancel_futures=True)

    return server


async def pull_settings(ls: GradfixServer, base: Settings) -> Settings:
    """``base`` updated with the ``gradfix`` configuration section, when the client can
    answer ``workspace/configuration`` (clients that keep settings send no values)."""
    workspace = ls.client_capabilities.workspace
    if workspace is None or not workspace.configuration:
        return base
    try:
        answer = await ls.workspace_configuration_async(
            types.ConfigurationParams(items=[types.ConfigurationItem(section=SECTION)])
        )
    except Exception:  # a client that fails the request keeps the settings it pushed
        logger.exception("workspace/configuration failed")
        return base
    return read_settings(answer[0] if answer else None, base)


def run(stdin: Any = None, stdout: Any = None) -> int:
    """Run the server on ``stdin``/``stdout`` (default: the process's) until ``exit``;
    the LSP exit status (0 after ``shutdown``, 1 otherwise). ``gradfix lsp`` starts it
    through :func:`gradfix.lsp.serve`, which answers ``initialize`` first."""
    logging.basicConfig(format="gradfix lsp: %(levelname)s: %(message)s")  # stderr
    BufferLint.freeze = True
    server = create_server()
    server.start_io(stdin, stdout)
    status = 0 if server.shutdown_requested else 1
    if any(thread.is_alive() for thread in server.verify_threads):
        # the oracle's own worker threads would hold the exit until their runs end
        logging.shutdown()
        os._exit(status)  # stdout is flushed and closed by pygls at exit
    return status
