"""Lint an edited text again by checking only what the edit can change: the editor's
diagnostics after a keystroke in a big file (issue 12; issue 32: ≤ 50 ms median for a
5,000-8,000-line real file, an edit anywhere).

A file is a sequence of *units*, its top-level statements (decorators included; statements
that share a line are one unit); a top-level class is split into a header (its decorators,
bases and ``class`` line) and one unit per statement of its body (a method: an edit in a
4,000-line class re-checks the method, not the class). What one unit's findings depend on
in another unit goes through names: the analysis links a call to the functions and
methods of that name (``calls_by_name``: every ``def`` and ``class`` at any depth), a
name to its module-level bindings, an attribute set on an object (``m.inplace = True``,
in a class's method ``self.x = ...``) to the code that reads or passes that name. Each
unit records the names it *binds* that way and every name it *uses* (variables,
attributes, keywords, identifier strings); two units are linked when one binds a name the
other uses, and a class's members are linked to its header. An edit replaces the units it
touches (or adds units between two: a module-level line typed) with the units of its
lines parsed alone; those are checked again with the units linked to them, transitively,
nearest first, and with the imports (and the header of a class whose member is checked):
the other units' lines are blanked (same line numbers, same text where checked) and their
findings are kept from the last lint, shifted by the lines the edit added or removed
(with the lines their messages cite).

In a real file the links reach most of the file (a 4,000-line class, helpers called
everywhere), so at most :data:`BUDGET` lines are checked with the edit: when the linked
units fit, the answer is the full lint's (``Snapshot.exact``); when they do not, the
nearest that fit are the edited units' context, only the edited units' findings are
checked again and the others' are kept: a finding elsewhere that the edit changed, or one
of the edited units' whose context did not fit, is wrong until the language server's full
lint, once typing pauses (:mod:`gradfix.lsp`), corrects it.

    snapshot = Snapshot.of(source, tree, findings, rules, path)   # after a full lint
    again = relint(snapshot, new_source)    # None: the edit needs a full lint

:func:`relint` answers ``None`` (lint the whole text) when the edited lines do not parse
on their own (at their indentation), add, remove or change an import, or empty a class.
``tests/test_incremental.py`` compares both on many edits.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gradfix import pyast
from gradfix.engine import FileLint
from gradfix.rule import Finding, Rule
from gradfix.semantic.syntax import is_super_call

#: line breaks other than ``\\n`` that some tools count and others do not: full lint
_OTHER_BREAKS = re.compile(r"[\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029]")
#: a finding whose message cites a line: re-checked when lines move
_CITES_LINE = re.compile(r"\blines? \d")
#: a cited line or span of lines (``line 49``, ``line 200-203``), and a number in it
_CITED_LINE = re.compile(r"\blines? \d+(?:-\d+)?")
_NUMBER = re.compile(r"\d+")
#: calls whose string arguments name attributes (``setattr(m, "inplace", True)``)
_ATTRIBUTE_CALLS = frozenset(
    {"setattr", "register_buffer", "register_parameter", "register_module", "add_module"}
)
#: at most this many lines checked again after an edit (with the edited ones): past it the
#: nearest linked units that fit, an answer that is not exact (a full lint confirms it)
BUDGET = 400
_Index = dict[str, list[int]]  # a name -> the units that bind (or use) it


@dataclass(frozen=True)
class Unit:
    """A top-level statement (or several on one line): lines ``start``..``end`` (1-based,
    inclusive, decorators included), what it binds and uses by name. A top-level class
    whose body starts on a line of its own is split: a *header* unit (its decorators and
    ``class`` line(s), ``end`` the line before its body) followed by one *member* unit per
    statement of its body (a method, a class attribute); ``last`` is the class's last line
    (``end`` for every other unit)."""

    start: int
    end: int
    binds: frozenset[str]
    uses: frozenset[str]
    is_import: bool  # only import statements
    imports: tuple[str, ...]  # every import in it (a function's own ``import torch``)
    member: bool = False  # a statement of a split class's body
    header: bool = False  # a split class's own lines
    last: int = 0  # the class's last line, for a header (else ``end``)

    def shifted(self, delta: int) -> Unit:
        return Unit(
            self.start + delta,
            self.end + delta,
            self.binds,
            self.uses,
            self.is_import,
            self.imports,
            self.member,
            self.header,
            self.last + delta,
        )

    @property
    def lines(self) -> int:
        return self.end - self.start + 1


@dataclass(frozen=True)
class Snapshot:
    """A text, its units and its findings as a full lint gave them (or :func:`relint`
    computed them). ``exact``: a full lint, or a re-check that reached every unit linked
    to the edit (see the module docstring)."""

    source: str
    lines: tuple[str, ...]  # ``source`` split after each ``\\n``
    units: tuple[Unit, ...]
    findings: tuple[Finding, ...]
    rules: tuple[type[Rule], ...]
    path: str
    exact: bool = True

    @classmethod
    def of(
        cls,
        source: str,
        tree: ast.Module,
        findings: Sequence[Finding],
        rules: Sequence[type[Rule]],
        path: str,
    ) -> Snapshot | None:
        """The snapshot of a full lint; ``None`` for a text this module does not handle."""
        if _OTHER_BREAKS.search(source):
            return None
        lines = tuple(source.splitlines(keepends=True))
        return cls(source, lines, units_of(tree.body), tuple(findings), tuple(rules), path)


def units_of(body: Sequence[ast.stmt], member: bool = False) -> tuple[Unit, ...]:
    """The units of a module's top-level statements (or, ``member``, of a split class's
    body), in order; a split class is its header followed by its members."""
    units: list[Unit] = []
    for statements in _spans(body):
        first = statements[0]
        if not member and len(statements) == 1 and type(first) is ast.ClassDef:
            body_line = _first_line(first.body[0])
            if body_line > first.lineno:  # ``class A: x = 1`` stays one unit
                units.append(_header(first, body_line - 1))
                units += units_of(first.body, member=True)
                continue
        units.append(_unit(statements, member))
    return tuple(units)


def _spans(body: Sequence[ast.stmt]) -> list[list[ast.stmt]]:
    spans: list[list[ast.stmt]] = []
    for statement in body:
        if spans and _first_line(statement) <= (spans[-1][-1].end_lineno or 0):
            spans[-1].append(statement)  # ``a = 1; b = 2``: one unit
        else:
            spans.append([statement])
    return spans


def _first_line(statement: ast.stmt) -> int:
    decorators = getattr(statement, "decorator_list", ())
    return min([statement.lineno, *(d.lineno for d in decorators)])


def _unit(statements: list[ast.stmt], member: bool = False) -> Unit:
    names = _Names(member)
    for statement in statements:
        names.visit(statement)
    end = statements[-1].end_lineno or statements[-1].lineno
    return Unit(
        start=_first_line(statements[0]),
        end=end,
        binds=frozenset(names.binds),
        uses=frozenset(names.uses),
        is_import=all(type(s) in (ast.Import, ast.ImportFrom) for s in statements),
        imports=tuple(names.imports),
        member=member,
        last=end,
    )


def _header(node: ast.ClassDef, end: int) -> Unit:
    """A split class's own lines: decorators, bases and keywords, the name it binds."""
    names = _Names()
    for part in (*node.decorator_list, *node.bases, *node.keywords):
        names.visit(part)
    return Unit(
        start=_first_line(node),
        end=end,
        binds=frozenset({node.name}),
        uses=frozenset({node.name, *names.uses}),
        is_import=False,
        imports=tuple(names.imports),
        header=True,
        last=node.end_lineno or node.lineno,
    )


class _Names(ast.NodeVisitor):
    """What a unit binds for other units and every name it uses (see the module
    docstring): more than the analysis reads, never less. In a class's member, an
    attribute set on ``self`` binds it too (another member reads it)."""

    def __init__(self, member: bool = False) -> None:
        self.binds: set[str] = set()
        self.uses: set[str] = set()
        self.depth = 0  # nested scopes: a plain assignment there binds a local
        self.imports: list[str] = []  # each import, dumped without its position
        self.member = member

    def visit_Import(self, node: ast.Import | ast.ImportFrom) -> None:
        self.imports.append(ast.dump(node))
        self.generic_visit(node)

    visit_ImportFrom = visit_Import

    def visit_Name(self, node: ast.Name) -> None:
        self.uses.add(node.id)
        if self.depth == 0 and type(node.ctx) is not ast.Load:
            self.binds.add(node.id)  # a module-level variable (a class attribute)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if not is_super_call(node.value):  # ``super().f()`` runs a base's: a use of the base
            self.uses.add(node.attr)
        if type(node.ctx) is not ast.Load and (self.member or not _on_self(node)):
            self.binds.add(node.attr)  # ``m.inplace = True``: read wherever ``inplace`` is
        self.generic_visit(node)

    def visit_keyword(self, node: ast.keyword) -> None:
        if node.arg is not None:
            self.uses.add(node.arg)
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if type(node.value) is str and node.value.isidentifier():
            self.uses.add(node.value)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        name = func.id if type(func) is ast.Name else getattr(func, "attr", None)
        if name in _ATTRIBUTE_CALLS:
            for argument in node.args[:2]:
                if type(argument) is ast.Constant and type(argument.value) is str:
                    self.binds.add(argument.value)
        self.generic_visit(node)

    def visit_Global(self, node: ast.Global | ast.Nonlocal) -> None:
        self.binds.update(node.names)
        self.uses.update(node.names)

    visit_Nonlocal = visit_Global

    def _scope(self, node: ast.AST, name: str | None) -> None:
        if name is not None:
            self.binds.add(name)  # calls by name reach every def and class, at any depth
            if self.depth == 0 and not self.member:
                self.uses.add(name)  # a module-level name defined twice: one binding
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._scope(node, node.name)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        self._scope(node, node.name)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._scope(node, node.name)

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self._scope(node, None)

    def _comprehension(self, node: ast.AST) -> None:
        self._scope(node, None)

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _comprehension


def _on_self(node: ast.Attribute) -> bool:
    return type(node.value) is ast.Name and node.value.id in ("self", "cls")


def relint(previous: Snapshot, source: str) -> Snapshot | None:
    """The snapshot of ``source``, an edit of ``previous.source``, re-checking only the
    units the edit can change; ``None`` when it needs a full lint (see the module
    docstring)."""
    if _OTHER_BREAKS.search(source):
        return None
    lines = tuple(source.splitlines(keepends=True))
    edit = _edit(previous, lines)
    if edit is None:
        return None
    fresh = _parse_span(previous, lines, edit)
    if fresh is None:
        return None
    lo, hi, delta = edit.lo, edit.hi, len(lines) - len(previous.lines)
    old = previous.units
    units = (*old[:lo], *fresh, *(u.shifted(delta) for u in old[hi:]))
    checked, exact = _linked(previous, edit, fresh, delta)
    # positions in the new text: units before the edit keep theirs, later ones move
    moved = len(fresh) - (hi - lo)

    def new_place(i: int) -> int:
        return i if i < lo else i + moved

    edited = set(range(lo, lo + len(fresh)))
    kept = sorted({new_place(i) for i in checked} | edited)
    context = set(kept) | {i for i, u in enumerate(units) if u.is_import}
    context |= {_header_of(units, i) for i in kept if units[i].member}
    placeholders = {
        units[i].end + 1: _indent(lines[units[i].end])
        for i in context
        if units[i].header and not _any_member_in(units, i, context)
    }
    reduced = _reduced(lines, [units[i] for i in sorted(context)], placeholders)
    try:
        lint = FileLint(reduced, rules=previous.rules, path=previous.path, lazy_fixes=True)
    except Exception:  # a syntax error the span alone did not show: the full lint says it
        return None
    if lint.crashes:
        return None  # the full lint reports the crash
    # past the budget the linked units are the edited ones' context: their findings are
    # carried (checked without their own context they would be wrong more often)
    again = edited | {new_place(i) for i in checked} if exact else edited
    rechecked_units = [units[i] for i in sorted(again)]
    rechecked = [f for f in lint.findings if _inside(f, rechecked_units)]
    replaced = [*old[lo:hi], *(old[i] for i in checked if exact)]
    carried = [_moved(f, edit.end, delta) for f in previous.findings if not _inside(f, replaced)]
    findings = tuple(sorted(rechecked + carried, key=_order))
    return Snapshot(source, lines, units, findings, previous.rules, previous.path, exact)


@dataclass(frozen=True)
class _Edit:
    """The units an edit replaces: ``units[lo:hi]`` of the old text, whose lines (with
    the changed ones) are ``start``..``end`` of the old text; ``owner``: the header of the
    split class whose body holds them (``None`` at module level)."""

    lo: int
    hi: int
    start: int
    end: int
    owner: Unit | None


def _edit(previous: Snapshot, lines: tuple[str, ...]) -> _Edit | None:
    """What the edit turning ``previous`` into ``lines`` replaces: the member of a split
    class holding every changed line (or the place between two members), else the
    top-level units the changed lines touch (or the place between two); ``None`` when
    nothing changed."""
    old = previous.lines
    shortest = min(len(old), len(lines))
    prefix = 0
    while prefix < shortest and old[prefix] == lines[prefix]:
        prefix += 1
    suffix = 0
    while suffix < shortest - prefix and old[-1 - suffix] == lines[-1 - suffix]:
        suffix += 1
    if prefix == len(old) == len(lines):
        return None  # nothing changed: the caller has the lint
    first, last = prefix + 1, len(old) - suffix  # 1-based changed lines of the old text

    def touches(start: int, end: int) -> bool:
        # an insertion (last < first) goes strictly inside, between two of its lines
        return start <= last and first <= end if last >= first else start < first <= end

    units = previous.units
    for index, unit in enumerate(units):
        if unit.header and unit.end < first and (last if last >= first else first) <= unit.last:
            members = range(index + 1, _members_end(units, index))
            hit = [i for i in members if touches(units[i].start, units[i].end)]
            if len(hit) > 1:
                break  # two members: the whole class
            if hit:
                member = units[hit[0]]
                start, end = min(first, member.start), max(last, member.end)
                return _Edit(hit[0], hit[0] + 1, start, end, unit)
            at = next((i for i in members if units[i].start > last), members.stop)
            return _Edit(at, at, first, last, unit)
    hit = [i for i, u in enumerate(units) if not u.member and touches(u.start, u.last)]
    if not hit:
        at = next((i for i, u in enumerate(units) if u.start > last), len(units))
        before = _header_of(units, at - 1) if at else None
        typed = [line for line in lines[first - 1 : last + len(lines) - len(old)] if line.strip()]
        if before is not None and units[before].header and typed and typed[0][0] in " \t":
            return _Edit(at, at, first, last, units[before])  # indented after a class
        return _Edit(at, at, first, last, None)
    lo, hi = hit[0], _members_end(units, hit[-1])
    start, end = min(first, units[lo].start), max(last, units[hi - 1].last)
    return _Edit(lo, hi, start, end, None)


def _members_end(units: Sequence[Unit], index: int) -> int:
    """The index after unit ``index`` and, for a header, after its members."""
    end = index + 1
    if units[index].header:
        while end < len(units) and units[end].member:
            end += 1
    return end


def _header_of(units: Sequence[Unit], index: int) -> int:
    while units[index].member:
        index -= 1
    return index


def _any_member_in(units: Sequence[Unit], header: int, chosen: set[int]) -> bool:
    return any(i in chosen for i in range(header + 1, _members_end(units, header)))


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def _parse_span(previous: Snapshot, lines: tuple[str, ...], edit: _Edit) -> tuple[Unit, ...] | None:
    """The units of the new text's lines of the edit, parsed alone at their place (in a
    class at the place of the split class's body); ``None`` when they do not parse alone
    or at the same indentation as the class's other members, or when an import is added,
    removed or changed (an import inside a function the edit leaves alone is fine)."""
    replaced = previous.units[edit.lo : edit.hi]
    if any(u.is_import for u in replaced):
        return None
    delta = len(lines) - len(previous.lines)
    parsed = _parse(lines[edit.start - 1 : edit.end + delta], edit)
    if parsed is None:
        return None
    if parsed and edit.owner is not None:
        indent = _indent(previous.lines[edit.owner.end])  # the first member's
        if any(_indent(lines[_first_line(s) - 1]) != indent for s in parsed):
            return None  # in the whole text they would nest elsewhere
    if not parsed and edit.owner is not None and _emptied(previous, edit):
        return None  # a class needs a body
    units = units_of(parsed, member=edit.owner is not None)
    if any(u.is_import for u in units):
        return None
    if [i for u in replaced for i in u.imports] != [i for u in units for i in u.imports]:
        return None
    return units


def _parse(span: Sequence[str], edit: _Edit) -> list[ast.stmt] | None:
    """The statements of ``span``, lines ``edit.start``... of a text, at their place."""
    if all(not line.strip() or line.lstrip().startswith("#") for line in span):
        return []
    if edit.owner is None:
        text = "\n" * (edit.start - 1) + "".join(span)
    else:
        text = "\n" * (edit.start - 2) + "class _:\n" + "".join(span)
    try:
        tree = pyast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    return tree.body if edit.owner is None else tree.body[0].body  # type: ignore[attr-defined]


def _emptied(previous: Snapshot, edit: _Edit) -> bool:
    """Whether the edit removes every member of its class (a class needs a body)."""
    assert edit.owner is not None
    index = previous.units.index(edit.owner)
    return edit.hi - edit.lo == _members_end(previous.units, index) - index - 1


def _linked(
    previous: Snapshot, edit: _Edit, fresh: tuple[Unit, ...], delta: int
) -> tuple[list[int], bool]:
    """The indices (in ``previous.units``) of the units to check again with the edited
    ones: those linked to them by names, transitively, nearest first, and, when lines
    moved, those whose findings cite a line; whether that reached every linked unit
    within :data:`BUDGET` lines (else the nearest that fit: a unit too big is skipped,
    the smaller ones after it still come)."""
    units = previous.units
    binders: _Index = {}
    users: _Index = {}
    for i, unit in enumerate(units):
        if edit.lo <= i < edit.hi or unit.is_import:
            continue
        for name in unit.binds:
            binders.setdefault(name, []).append(i)
        for name in unit.uses:
            users.setdefault(name, []).append(i)
    pending: deque[int] = deque()
    queued = set(range(edit.lo, edit.hi))  # each unit is queued once

    def queue(indices: Iterable[int]) -> None:
        for i in indices:
            if i not in queued:
                queued.add(i)
                pending.append(i)

    for seed in (*units[edit.lo : edit.hi], *fresh):
        queue(_neighbours(seed, binders, users))
    if delta:
        queue(_citing_lines(previous, edit))
    found: list[int] = []
    skipped = False
    size = sum(u.lines for u in fresh)
    while pending:
        i = pending.popleft()
        if size + units[i].lines > BUDGET:
            skipped = True
            continue
        size += units[i].lines
        found.append(i)
        queue(_links(units, i, binders, users))
    return sorted(found), not skipped


def _links(units: Sequence[Unit], index: int, binders: _Index, users: _Index) -> list[int]:
    """The units linked to ``units[index]``: by names, and a class's members to it."""
    found = _neighbours(units[index], binders, users)
    if units[index].header:
        found += range(index + 1, _members_end(units, index))
    return found


def _neighbours(unit: Unit, binders: _Index, users: _Index) -> list[int]:
    found = [i for name in unit.uses for i in binders.get(name, ())]
    return found + [i for name in unit.binds for i in users.get(name, ())]


def _citing_lines(previous: Snapshot, edit: _Edit) -> list[int]:
    cited = [f for f in previous.findings if _CITES_LINE.search(f.message)]
    return [
        i
        for i, unit in enumerate(previous.units)
        if not edit.lo <= i < edit.hi and any(unit.start <= f.line <= unit.end for f in cited)
    ]


def _reduced(lines: tuple[str, ...], kept: list[Unit], placeholders: dict[int, str]) -> str:
    """The text with the lines of every unit not in ``kept`` left empty, and a ``pass``
    at each line of ``placeholders`` (a class kept without its members), indented."""
    keep = bytearray(len(lines) + 2)
    for unit in kept:
        keep[unit.start : unit.end + 1] = b"\x01" * (unit.end - unit.start + 1)
    return "".join(
        line
        if keep[number]
        else (placeholders[number] + "pass\n" if number in placeholders else "\n")
        for number, line in enumerate(lines, start=1)
    )


def _inside(finding: Finding, units: Sequence[Unit]) -> bool:
    return any(unit.start <= finding.line <= unit.end for unit in units)


def _moved(finding: Finding, after: int, delta: int) -> Finding:
    """A carried finding in the new text: on its line, and citing the lines, past
    ``after`` moved by ``delta``."""
    if not delta:
        return finding
    if finding.line > after:
        finding = dataclasses.replace(
            finding, line=finding.line + delta, end_line=finding.end_line + delta
        )
    if not _CITES_LINE.search(finding.message):
        return finding

    def move(match: re.Match[str]) -> str:
        number = int(match.group())
        return str(number + delta if number > after else number)

    def cited(text: str) -> str:
        return _CITED_LINE.sub(lambda m: _NUMBER.sub(move, m.group()), text)

    fix = finding.fix
    if fix is not None:
        fix = dataclasses.replace(fix, description=cited(fix.description))
    return dataclasses.replace(finding, message=cited(finding.message), fix=fix)


def _order(finding: Finding) -> tuple[int, int, str]:
    return (finding.line, finding.col, finding.code)
