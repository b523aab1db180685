"""The engine: a pure function from source text to findings and fixed text.

    result = lint_source(source, rules=all_rules(), fix=True)
    result.findings   # what the rules reported on the original source
    result.source     # the source with every applicable fix applied
    result.crashes    # rules that raised on this source (the others' findings are kept)

Fixing runs in passes: lint, pick the applicable fixes whose targets do not overlap
(first by position wins; the others wait for the next pass), apply them with one
transformer, add the imports they need, re-parse the result (a fix that breaks the syntax
is dropped and reported), and lint again, until nothing changes or ``max_passes``.
"""

from __future__ import annotations

import ast
import dataclasses
import gc
import re
import symtable
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

import libcst as cst

from gradfix import pyast
from gradfix.edits import Editor
from gradfix.fileio.text import keep_line_endings
from gradfix.lazy import lazy_class
from gradfix.rule import (
    Finding,
    Fix,
    FixPlan,
    FixSafety,
    FixSummary,
    Report,
    Rule,
    RuleContext,
    rules_for_source,
)
from gradfix.semantic import Semantic
from gradfix.suppression import has_suppressions, unsuppressed
from gradfix.walk import walk_ast_batched, walked_types

if TYPE_CHECKING:
    from libcst.metadata import CodeRange

MAX_PASSES = 10


class SourceError(Exception):
    """The source cannot be parsed. ``str()`` is a one-line message."""

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.line = line


@dataclass(frozen=True)
class RuleCrash:
    """A rule raised while visiting a file: its reports on that file are dropped, the
    other rules' are kept."""

    code: str
    name: str
    error: str  # ``RecursionError: maximum recursion depth exceeded``
    traceback: str

    @classmethod
    def of(cls, rule: type[Rule], error: Exception) -> RuleCrash:
        lines = str(error).strip().splitlines()
        detail = f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__
        trace = "".join(traceback.format_exception(error))
        return cls(rule.code, rule.name, detail, trace)

    def line(self) -> str:
        """``internal error in GF205 (data-mutation): RecursionError: ...; please report``"""
        return f"internal error in {self.code} ({self.name}): {self.error}; please report"


@dataclass
class LintResult:
    findings: list[Finding]
    source: str
    #: findings still present after fixing (those without an applicable fix)
    remaining: list[Finding] = field(default_factory=list)
    #: one line per fix that was dropped because it broke the syntax
    dropped: list[str] = field(default_factory=list)
    applied: int = 0
    #: rules that raised (at most one entry per rule); their findings are missing
    crashes: list[RuleCrash] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return self.applied > 0


def parse(source: str) -> cst.Module:
    """Parse with LibCST; raise :class:`SourceError` with the line of the problem."""
    try:
        with _nodes_unvalidated():
            return cst.parse_module(source)
    except cst.ParserSyntaxError as error:
        raise _syntax_error(source, error) from None
    except (RecursionError, MemoryError) as error:
        raise SourceError(f"cannot parse: {type(error).__name__}") from None


@contextmanager
def _nodes_unvalidated() -> Iterator[None]:
    """Build nodes without LibCST's per-node validation (``CSTNode.__post_init__``).

    The parser only builds nodes from source it accepted, so checking each of them again
    is redundant; it costs about 15% of the parse. Nodes built later (a rule's
    replacement, a fix) are validated as usual."""
    from libcst._nodes.base import CSTNode

    validate = CSTNode.__post_init__
    CSTNode.__post_init__ = _no_validation  # type: ignore[method-assign]
    try:
        yield
    finally:
        CSTNode.__post_init__ = validate  # type: ignore[method-assign]


def _no_validation(self: cst.CSTNode) -> None:
    return None


@contextmanager
def cyclic_gc_paused() -> Iterator[None]:
    """Run the block without Python's cyclic garbage collector.

    A lint allocates a whole tree and its analysis, hundreds of thousands of objects that
    reference counting frees and that hold no cycles worth collecting; meanwhile the
    collector would traverse them again and again (a third of a lint's time). It runs
    again after the block, when the file's objects are gone. Nested blocks are fine."""
    paused = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if paused:
            gc.enable()


def _check_syntax(source: str) -> ast.Module:
    """Python's ``ast`` of ``source``; :class:`SourceError` when it does not parse."""
    try:
        return pyast.parse(source)
    except SyntaxError as error:
        raise SourceError(
            f"syntax error at line {error.lineno}: {error.msg}", error.lineno
        ) from None
    except (ValueError, RecursionError, MemoryError) as error:
        raise SourceError(f"cannot parse: {error}") from None


def _check_grammar(source: str) -> None:
    """Raise :class:`SourceError` where :func:`_check_syntax` would, without building the
    tree: Python's symbol-table pass runs the same parser on the same text and keeps no
    Python objects (0.70 CPU s instead of 0.95 for ``ast.parse`` of the 1,548 files of
    transformers that cannot import torch). What it rejects besides the grammar
    (``nonlocal`` at module level) is left to ``ast.parse``, which decides."""
    try:
        symtable.symtable(source, "<source>", "exec")
    except Exception:
        _check_syntax(source)  # the parser's own verdict and message


def _syntax_error(source: str, error: cst.ParserSyntaxError) -> SourceError:
    """Python's own message when it rejects the code too (clearer than LibCST's)."""
    try:
        pyast.parse(source)
    except SyntaxError as python_error:
        line = python_error.lineno or error.raw_line
        return SourceError(f"syntax error at line {line}: {python_error.msg}", line)
    except (ValueError, RecursionError, MemoryError):
        pass
    first = str(error.message).strip().splitlines()[0] if error.message else "invalid syntax"
    return SourceError(
        f"syntax error at line {error.raw_line}: {first} (LibCST cannot parse this syntax)",
        error.raw_line,
    )


#: A line that may import torch: ``import torch``, ``import numpy as np, torch.nn as nn``,
#: ``from torch import nn``, ``try: import torch``, also across a backslash continuation.
#: An over-approximation of :meth:`Semantic.imports_torch` on the text.
_MAY_IMPORT_TORCH = re.compile(r"\bimport\b(?:[^\n]|\\\n)*?\btorch\b|\bfrom(?:\s|\\\n)+torch\b")


def may_import_torch(source: str) -> bool:
    return "torch" in source and _MAY_IMPORT_TORCH.search(source) is not None


def active_rules(rules: Sequence[type[Rule]], source: str) -> list[type[Rule]]:
    """The rules that may fire on ``source``: none when the text cannot import torch (every
    rule needs a torch import; such a file is only syntax-checked), else all of them (each
    rule is only called for the node types it visits)."""
    if not may_import_torch(source):
        return []
    return list(rules)


@dataclass
class Linted:
    """One lint of one source: the reports, and the LibCST tree when the file needed one
    (a rule not yet on ``ast``, or a finding with a fix to build)."""

    reports: list[Report]
    source: str = ""
    tree: ast.Module | None = None  # Python's ``ast`` of ``source``
    #: functions holding a finding whose grad mode only other files' callers could decide
    open_callers: tuple[str, ...] = ()
    torch_alias: str | None = None
    module: cst.Module | None = None
    editor: Editor | None = None
    realised: bool = False  # every planned fix built (or dropped)
    #: one line per fix that could not be built or printed (an expression too deep)
    notes: list[str] = field(default_factory=list)

    @property
    def positions(self) -> Mapping[cst.CSTNode, CodeRange]:
        assert self.editor is not None  # only asked where fixes were built
        return self.editor.positions

    def realise(self) -> None:
        """Build every planned fix with LibCST (parsing the source once, only when some
        finding has a plan); a source LibCST cannot parse keeps its findings, without
        fixes."""
        if self.realised:
            return
        self.realised = True
        if not any(isinstance(r.fix, FixPlan) for r in self.reports):
            return
        if self.module is None:
            try:
                self.module = parse(self.source)
            except SourceError:
                self.reports = [dataclasses.replace(r, fix=None) for r in self.reports]
                return
        self.editor = Editor(self.module, self.source, self.torch_alias)
        self.reports = _realised(self.reports, self.editor, self.notes)


def collect_reports(
    source: str,
    rules: Sequence[type[Rule]],
    path: str,
    crashes: list[RuleCrash] | None = None,
    *,
    realise: bool = True,
    no_grad_callers: frozenset[str] = frozenset(),
) -> Linted:
    """Run ``rules`` over ``source`` in one batched walk of its ``ast`` (the analysis's
    pre-order); then, only when some finding has a planned fix, parse with LibCST and
    build the fixes (``realise``; else
    :meth:`Linted.realise` does it when a fix is wanted: the editor's diagnostics need
    none). A rule that raises is added to ``crashes`` (when given; else the exception
    propagates) and reports nothing; the other rules go on. Without the cyclic garbage
    collector (:func:`cyclic_gc_paused`)."""
    with cyclic_gc_paused():
        return _collect_reports(
            source, rules, path, crashes, realise=realise, no_grad_callers=no_grad_callers
        )


def _collect_reports(
    source: str,
    rules: Sequence[type[Rule]],
    path: str,
    crashes: list[RuleCrash] | None = None,
    *,
    realise: bool = True,
    no_grad_callers: frozenset[str] = frozenset(),
) -> Linted:
    tree = _check_syntax(source)
    crashed: dict[type[Rule], RuleCrash] = {}

    def crash(visitor: object, error: Exception) -> None:
        rule = type(visitor)
        assert issubclass(rule, Rule)
        crashed[rule] = RuleCrash.of(rule, error)

    linted = Linted([], source, tree)
    running = rules_for_source(rules, source)
    walked = walked_types(tuple(running))
    semantic = Semantic(tree, source, no_grad_callers, walked)
    if semantic.imports_torch() and rules:
        linted.torch_alias = semantic.torch_alias()
        context = RuleContext(path=path, source=source, semantic=semantic)
        visitors = [rule(context) for rule in running]
        walk_ast_batched(
            tree,
            visitors,
            on_error=None if crashes is None else crash,
            order=semantic.order,
            last=semantic.last,
            by_type=semantic.by_type,
            call_aliases=semantic.call_aliases(),
            walked=(walked, semantic.walked_nodes),
        )
        reports = [r for v in visitors if type(v) not in crashed for r in v.reports]
        if reports and has_suppressions(source):
            lines = {id(r.node): _statement_line(semantic, r.node) for r in reports}
            reports = unsuppressed(reports, source, lambda r: lines.get(id(r.node)))
        linted.reports = reports
        if reports and semantic.open_functions:
            linted.open_callers = _open_callers(semantic, reports)
    if realise:
        linted.realise()
    if crashes is not None:
        crashes.extend(c for c in crashed.values() if c.code not in {k.code for k in crashes})
    linted.reports.sort(key=lambda r: (r.position.start.line, r.position.start.column, r.rule.code))
    return linted


def _open_callers(semantic: Semantic, reports: list[Report]) -> tuple[str, ...]:
    """The names of the functions around the reports whose grad mode no call site of
    this file decides (other files' callers may: :mod:`gradfix.project`)."""
    names = {
        ancestor.name  # type: ignore[attr-defined]
        for report in reports
        for ancestor in semantic.ancestors(report.node)  # type: ignore[arg-type]
        if ancestor in semantic.open_functions
    }
    return tuple(sorted(names))


def _statement_line(semantic: Semantic, node: object) -> int | None:
    statement = semantic.enclosing_statement(node)  # type: ignore[arg-type]
    return None if statement is None else statement.lineno


def _realised(reports: list[Report], editor: Editor, notes: list[str]) -> list[Report]:
    """``reports`` with each planned fix built (once per plan: findings share them); a
    plan LibCST cannot build (:data:`TOO_DEEP`) leaves its findings without a fix and a
    line in ``notes``."""
    built: dict[int, Fix | None] = {}
    result = []
    for report in reports:
        plan = report.fix
        if isinstance(plan, FixPlan):
            if id(plan) not in built:
                built[id(plan)] = _built(plan, editor, report, notes)
            report = dataclasses.replace(report, fix=built[id(plan)])
        result.append(report)
    return result


#: why a fix is missing when LibCST recursed too deep (CPython compiles deeper nesting
#: than LibCST's recursive visitors and code generation can walk)
TOO_DEEP = "the file holds an expression nested too deeply for LibCST to rewrite"


def _built(plan: FixPlan, editor: Editor, report: Report, notes: list[str]) -> Fix | None:
    try:
        return editor.realise(plan)
    except RecursionError:
        line = report.position.start.line
        _note(notes, f"{report.rule.code} at line {line} is reported without a fix: {TOO_DEEP}")
        return None


def _note(notes: list[str], note: str) -> None:
    if note not in notes:
        notes.append(note)


def to_finding(report: Report) -> Finding:
    start, end = report.position.start, report.position.end
    summary = None
    if report.fix is not None:
        summary = FixSummary(report.fix.safety.value, report.fix.description)
    return Finding(
        line=start.line,
        col=start.column + 1,
        code=report.rule.code,
        name=report.rule.name,
        message=report.message,
        end_line=end.line,
        end_col=end.column + 1,
        fix=summary,
    )


class FileLint:
    """One source linted once: its findings at once, and from the same parse, on demand,
    each fix applied alone (:meth:`singles`: code frames, code actions, proofs) and the
    fixed text (:meth:`fixed`). The formats, the LSP, interactive review, notebooks and
    ``verify`` hold this object instead of linting the same text again.

        lint = FileLint(source, rules=rules, path=path)
        lint.findings              # what the rules report
        lint.singles()             # each fix alone (safe and unsafe)
        lint.fixed(unsafe_fixes=True).source
    """

    def __init__(
        self,
        source: str,
        *,
        rules: Sequence[type[Rule]],
        path: str = "<stdin>",
        lazy_fixes: bool = False,
        no_grad_callers: frozenset[str] = frozenset(),
    ) -> None:
        """``lazy_fixes``: build the fixes only when :meth:`singles` or :meth:`fixed` asks
        (the editor's diagnostics); a finding then says it has a fix when a rule planned
        one, even if building it fails later (it would delete a comment).
        ``no_grad_callers``: functions other files call only under ``no_grad``
        (:mod:`gradfix.project`)."""
        self.source = source
        self.rules = rules
        self.path = path
        self.no_grad_callers = no_grad_callers
        self.crashes: list[RuleCrash] = []
        active = active_rules(rules, source)
        if active:
            self._linted = collect_reports(
                source,
                active,
                path,
                self.crashes,
                realise=not lazy_fixes,
                no_grad_callers=no_grad_callers,
            )
        else:
            # cheap: a file no rule looks at only gets its syntax checked (:attr:`tree`
            # parses it if asked)
            _check_grammar(source)
            self._linted = Linted([], source)
        self.open_callers = self._linted.open_callers
        self.findings = [to_finding(r) for r in self._linted.reports]
        self._singles: list[SingleFix] | None = None

    @property
    def tree(self) -> ast.Module:
        """Python's ``ast`` of the source (parsed when first asked if no rule looked at
        the file)."""
        if self._linted.tree is None:
            self._linted.tree = _check_syntax(self.source)
        return self._linted.tree

    @property
    def notes(self) -> list[str]:
        """One line per fix that could not be built or printed (:data:`TOO_DEEP`)."""
        return list(self._linted.notes)

    def result(self) -> LintResult:
        """The findings as a :class:`LintResult` with nothing fixed."""
        findings = list(self.findings)
        return LintResult(
            findings,
            self.source,
            remaining=list(findings),
            dropped=self.notes,
            crashes=self.crashes,
        )

    def singles(self) -> list[SingleFix]:
        """Every fix the rules offer (safe and unsafe), each applied alone."""
        if self._singles is None:
            self._linted.realise()
            self._singles = _singles(self._linted)
        return self._singles

    def fixed(
        self,
        *,
        unsafe_fixes: bool = False,
        max_passes: int = MAX_PASSES,
        keep: Callable[[Finding], bool] | None = None,
    ) -> LintResult:
        """The source with every applicable fix applied, in passes (see the module
        docstring); ``keep`` limits fixing to the fixes whose findings it accepts, in one
        pass."""
        result = self.result()
        crashes = result.crashes = list(self.crashes)
        if keep is not None:
            max_passes = 1
        linted = self._linted
        linted.realise()
        for _ in range(max_passes):
            for note in linted.notes:
                _note(result.dropped, note)
            fixes = _applicable(linted.reports, unsafe_fixes, keep)
            if not fixes:
                break
            try:
                new_source, applied, dropped = _apply_pass(linted, fixes)
            except RecursionError:
                _note(result.dropped, f"no fix applied: {TOO_DEEP}")
                break
            result.dropped.extend(note for note in dropped if note not in result.dropped)
            # LibCST's endings differ from the file's (a final ``\r``): compare as written
            restored = keep_line_endings(self.source, new_source)
            if not applied or restored == result.source:
                break
            result.applied += applied
            result.source = restored
            linted = collect_reports(
                new_source, self.rules, self.path, crashes, no_grad_callers=self.no_grad_callers
            )
        result.remaining = [to_finding(r) for r in linted.reports]
        return result


def lint_source(
    source: str,
    *,
    rules: Sequence[type[Rule]],
    path: str = "<stdin>",
    fix: bool = False,
    unsafe_fixes: bool = False,
    max_passes: int = MAX_PASSES,
    keep: Callable[[Finding], bool] | None = None,
) -> LintResult:
    """Lint ``source`` with ``rules``; with ``fix``, also return the fixed source
    (:class:`FileLint` keeps the lint to answer more questions about it).

    ``keep`` limits fixing to the fixes whose findings (on ``source``) it accepts, in one
    pass: ``gradfix fix --verify`` applies only the fixes that were proven one by one.
    A rule that raises does not stop the others: it is listed in ``result.crashes``."""
    lint = FileLint(source, rules=rules, path=path)
    if not fix:
        return lint.result()
    return lint.fixed(unsafe_fixes=unsafe_fixes, max_passes=max_passes, keep=keep)


def _applicable(
    reports: Sequence[Report], unsafe_fixes: bool, keep: Callable[[Finding], bool] | None = None
) -> list[Fix]:
    fixes: list[Fix] = []
    seen: set[int] = set()
    for report in reports:
        fix = report.fix
        if fix is None or id(fix) in seen:
            continue
        if fix.safety is FixSafety.UNSAFE and not unsafe_fixes:
            continue
        seen.add(id(fix))
        fixes.append(fix)
    if keep is not None:
        refused = {id(r.fix) for r in reports if r.fix is not None and not keep(to_finding(r))}
        fixes = [fix for fix in fixes if id(fix) not in refused]
    return fixes


@dataclass
class SingleFix:
    """One fix applied alone to the original source (what ``gradfix verify`` proves)."""

    findings: list[Finding]  # the findings this fix resolves, positions in the original
    safety: str
    description: str
    source: str | None  # None when the fix alone breaks the syntax


def single_fixes(
    source: str, *, rules: Sequence[type[Rule]], path: str = "<stdin>"
) -> list[SingleFix]:
    """Every fix the rules offer on ``source`` (safe and unsafe), each applied alone."""
    return FileLint(source, rules=rules, path=path).singles()


def _singles(linted: Linted) -> list[SingleFix]:
    grouped: dict[int, tuple[Fix, list[Finding]]] = {}
    for report in linted.reports:
        if isinstance(report.fix, Fix):
            entry = grouped.setdefault(id(report.fix), (report.fix, []))
            entry[1].append(to_finding(report))
    singles = []
    for fix, findings in grouped.values():
        assert linted.module is not None  # a report with a fix: the file was parsed
        try:
            fixed: str | None = keep_line_endings(linted.source, _render(linted.module, [fix]))
        except RecursionError:
            _note(linted.notes, f"no fix applied: {TOO_DEEP}")
            fixed = None
        if fixed is not None and not _compiles(fixed):
            fixed = None
        singles.append(SingleFix(findings, fix.safety.value, fix.description, fixed))
    return singles


def _apply_pass(linted: Linted, fixes: list[Fix]) -> tuple[str, int, list[str]]:
    """Apply the non-overlapping ``fixes``; return (source, number applied, dropped notes)."""
    chosen = _non_overlapping(fixes, linted.positions)
    module = linted.module
    assert module is not None
    new_source = _render(module, chosen)
    if _compiles(new_source):
        return new_source, len(chosen), []
    # Some fix breaks the syntax: keep only the ones that are fine on their own.
    good = [f for f in chosen if _compiles(_render(module, [f]))]
    dropped = [
        f"dropped a fix that broke the syntax: {f.description}" for f in chosen if f not in good
    ]
    while good:
        new_source = _render(module, good)
        if _compiles(new_source):
            return new_source, len(good), dropped
        dropped.append(f"dropped a fix that broke the syntax: {good[-1].description}")
        good.pop()
    return module.code, 0, dropped


def _non_overlapping(fixes: list[Fix], positions: Mapping[cst.CSTNode, CodeRange]) -> list[Fix]:
    def span(fix: Fix) -> list[tuple[tuple[int, int], tuple[int, int]]]:
        spans = []
        for edit in fix.edits:
            where = positions[edit.target]
            spans.append(
                ((where.start.line, where.start.column), (where.end.line, where.end.column))
            )
        return spans

    ordered = sorted(fixes, key=lambda f: min(span(f)))
    taken: list[tuple[tuple[int, int], tuple[int, int]]] = []
    chosen: list[Fix] = []
    for fix in ordered:
        spans = span(fix)
        if any(a[0] < b[1] and b[0] < a[1] for a in spans for b in taken):
            continue
        taken.extend(spans)
        chosen.append(fix)
    return chosen


@lazy_class
def _ApplyEdits() -> type:
    class ApplyEdits(cst.CSTTransformer):
        def __init__(self, fixes: Sequence[Fix]) -> None:
            super().__init__()
            self.replacements = {id(e.target): e.replacement for f in fixes for e in f.edits}
            #: the ``with`` statements that joinable fixes create
            self.joinable = {
                id(e.replacement)
                for f in fixes
                if f.joinable
                for e in f.edits
                if isinstance(e.replacement, cst.With)
            }

        def on_leave(self, original_node, updated_node):  # type: ignore[no-untyped-def]
            replacement = self.replacements.get(id(original_node))
            if replacement is not None:
                return replacement
            if self.joinable and isinstance(updated_node, (cst.Module, cst.IndentedBlock)):
                return _join_blocks(updated_node, self.joinable)
            return updated_node

    return ApplyEdits


_Body = TypeVar("_Body", "cst.Module", "cst.IndentedBlock")


def _join_blocks(node: _Body, created: set[int]) -> _Body:
    """Merge each ``with`` block a joinable fix created with the adjacent ``with`` blocks
    of the same header (``with torch.no_grad():``): one block, not one per rule or pass."""
    joined: list[cst.BaseStatement] = []
    for stmt in node.body:
        previous = joined[-1] if joined else None
        if (
            previous is not None
            and (id(previous) in created or id(stmt) in created)
            and _same_header(previous, stmt)
            and not _directive_between(previous, stmt)
        ):
            assert isinstance(previous, cst.With) and isinstance(stmt, cst.With)
            joined[-1] = _merged(previous, stmt)
            created.add(id(joined[-1]))  # a third block joins too
        else:
            joined.append(stmt)
    if len(joined) == len(node.body):
        return node
    return node.with_changes(body=joined)


def _same_header(first: cst.BaseStatement, second: cst.BaseStatement) -> bool:
    """Two plain ``with X():`` blocks (one item, no ``as``, indented bodies), same ``X()``."""
    blocks = (first, second)
    if not all(
        isinstance(b, cst.With)
        and b.asynchronous is None
        and len(b.items) == 1
        and b.items[0].asname is None
        and isinstance(b.body, cst.IndentedBlock)
        for b in blocks
    ):
        return False
    code = cst.Module([]).code_for_node
    return code(first.items[0].item) == code(second.items[0].item)  # type: ignore[attr-defined]


def _directive_between(first: cst.BaseStatement, second: cst.BaseStatement) -> bool:
    """A ``# gradfix: ...`` comment line separates the blocks: a structural line that must
    not move into a block (a notebook's cell marker, :mod:`gradfix.notebook`)."""
    assert isinstance(first, cst.With) and isinstance(first.body, cst.IndentedBlock)
    assert isinstance(second, cst.With)
    lines = [*first.body.footer, *second.leading_lines]
    return any(
        line.comment is not None and line.comment.value.startswith("# gradfix:") for line in lines
    )


def _merged(first: cst.With, second: cst.With) -> cst.With:
    """``first`` with ``second``'s statements appended; the comments between them (the
    first block's trailing comments, those above ``second``, the one on its header line)
    go above its first statement."""
    assert isinstance(first.body, cst.IndentedBlock) and isinstance(second.body, cst.IndentedBlock)
    comments = [*first.body.footer, *second.leading_lines]
    if second.body.header.comment is not None:
        comments.append(cst.EmptyLine(comment=second.body.header.comment))
    head, *rest = second.body.body
    assert isinstance(head, (cst.SimpleStatementLine, cst.BaseCompoundStatement))
    head = head.with_changes(leading_lines=[*comments, *head.leading_lines])
    body = first.body.with_changes(body=[*first.body.body, head, *rest], footer=second.body.footer)
    return first.with_changes(body=body)


def _render(module: cst.Module, fixes: Sequence[Fix]) -> str:
    new_module = module.visit(_ApplyEdits(fixes))
    imports = sorted({name for f in fixes for name in f.imports})
    if imports:
        new_module = add_imports(new_module, imports)
    return new_module.code


def add_imports(module: cst.Module, names: Sequence[str]) -> cst.Module:
    """Insert ``import name`` lines before the first import (after the docstring and
    ``__future__`` imports), taking over its leading comments; nothing else moves."""
    body = list(module.body)
    position = 0
    for index, stmt in enumerate(body):
        if _is_docstring(stmt) and index == 0 or _is_future_import(stmt):
            position = index + 1
            continue
        if _is_import(stmt):
            position = index
        break
    new = [cst.SimpleStatementLine([cst.Import([cst.ImportAlias(cst.Name(n))])]) for n in names]
    if position < len(body) and _is_import(body[position]):
        anchor = body[position]
        new[0] = new[0].with_changes(leading_lines=anchor.leading_lines)
        body[position] = anchor.with_changes(leading_lines=())
    body[position:position] = new
    return module.with_changes(body=body)


def _small(stmt: cst.BaseStatement) -> cst.BaseSmallStatement | None:
    if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1:
        return stmt.body[0]
    return None


def _is_docstring(stmt: cst.BaseStatement) -> bool:
    small = _small(stmt)
    return isinstance(small, cst.Expr) and isinstance(
        small.value, (cst.SimpleString, cst.ConcatenatedString)
    )


def _is_future_import(stmt: cst.BaseStatement) -> bool:
    small = _small(stmt)
    return (
        isinstance(small, cst.ImportFrom)
        and isinstance(small.module, cst.Name)
        and (small.module.value == "__future__")
    )


def _is_import(stmt: cst.BaseStatement) -> bool:
    return isinstance(_small(stmt), (cst.Import, cst.ImportFrom))


def _compiles(source: str) -> bool:
    try:
        pyast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True
