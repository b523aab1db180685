"""Lint an edited text again by checking only what the edit can change: the editor's
diagnostics after a keystroke in a big file (issue 12: ≤ 100 ms for 5,000 lines).

A file is a sequence of *units*, its top-level statements (decorators included; statements
that share a line are one unit). What one unit's findings depend on in another unit goes
through names: the analysis links a call to the functions and methods of that name
(``calls_by_name``: every ``def`` and ``class`` at any depth), a name to its module-level
bindings, an attribute set on an object (``m.inplace = True``) to the code that reads or
passes that name. Each unit records the names it *binds* that way and every name it
*uses* (variables, attributes, keywords, identifier strings); two units are linked when
one binds a name the other uses. An edit inside one unit re-checks that unit and every
unit linked to it, transitively, with the imports: the other units' lines are blanked
(same line numbers, same text where checked) and their findings are kept from the last
lint, shifted by the lines the edit added or removed.

    snapshot = Snapshot.of(source, tree, findings, rules, path)   # after a full lint
    again = relint(snapshot, new_source)    # None: the edit needs a full lint

:func:`relint` answers ``None`` (lint the whole text) when the edit is not inside one
unit, touches an import, does not parse on its own, or links to more than half of the
file. The language server checks the answer against a full lint once typing pauses
(:mod:`gradfix.lsp`), and ``tests/test_incremental.py`` compares both on many edits.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass

from gradfix.engine import FileLint
from gradfix.rule import Finding, Rule
from gradfix.semantic.syntax import is_super_call

#: line breaks other than ``\\n`` that some tools count and others do not: full lint
_OTHER_BREAKS = re.compile(r"[\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029]")
#: a finding whose message cites a line: re-checked when lines move
_CITES_LINE = re.compile(r"\blines? \d")
#: calls whose string arguments name attributes (``setattr(m, "inplace", True)``)
_ATTRIBUTE_CALLS = frozenset(
    {"setattr", "register_buffer", "register_parameter", "register_module", "add_module"}
)
#: never incremental past this share of the file's lines (a full lint is as fast), once
#: past this many lines
MAX_SHARE = 0.5
MIN_BUDGET = 100
_Index = dict[str, list[int]]  # a name -> the units that bind (or use) it


@dataclass(frozen=True)
class Unit:
    """One top-level statement (or several on one line): lines ``start``..``end``
    (1-based, inclusive, decorators included), what it binds and uses by name."""

    start: int
    end: int
    binds: frozenset[str]
    uses: frozenset[str]
    is_import: bool  # only import statements
    imports: bool  # an import anywhere in it (a function's own ``import torch``)

    def shifted(self, delta: int) -> Unit:
        return dataclasses.replace(self, start=self.start + delta, end=self.end + delta)


@dataclass(frozen=True)
class Snapshot:
    """A text, its units and its findings as a full lint gave them (or :func:`relint`
    computed them)."""

    source: str
    lines: tuple[str, ...]  # ``source`` split after each ``\\n``
    units: tuple[Unit, ...]
    findings: tuple[Finding, ...]
    rules: tuple[type[Rule], ...]
    path: str

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


def units_of(body: Sequence[ast.stmt]) -> tuple[Unit, ...]:
    """The units of a module's top-level statements, in order."""
    spans: list[list[ast.stmt]] = []
    for statement in body:
        if spans and _first_line(statement) <= (spans[-1][-1].end_lineno or 0):
            spans[-1].append(statement)  # ``a = 1; b = 2``: one unit
        else:
            spans.append([statement])
    return tuple(_unit(statements) for statements in spans)


def _first_line(statement: ast.stmt) -> int:
    decorators = getattr(statement, "decorator_list", ())
    return min([statement.lineno, *(d.lineno for d in decorators)])


def _unit(statements: list[ast.stmt]) -> Unit:
    names = _Names()
    for statement in statements:
        names.visit(statement)
    return Unit(
        start=_first_line(statements[0]),
        end=statements[-1].end_lineno or statements[-1].lineno,
        binds=frozenset(names.binds),
        uses=frozenset(names.uses),
        is_import=all(type(s) in (ast.Import, ast.ImportFrom) for s in statements),
        imports=names.imports,
    )


class _Names(ast.NodeVisitor):
    """What a unit binds for other units and every name it uses (see the module
    docstring): more than the analysis reads, never less."""

    def __init__(self) -> None:
        self.binds: set[str] = set()
        self.uses: set[str] = set()
        self.depth = 0  # nested scopes: a plain assignment there binds a local
        self.imports = False

    def visit_Import(self, node: ast.Import | ast.ImportFrom) -> None:
        self.imports = True
        self.generic_visit(node)

    visit_ImportFrom = visit_Import

    def visit_Name(self, node: ast.Name) -> None:
        self.uses.add(node.id)
        if self.depth == 0 and type(node.ctx) is not ast.Load:
            self.binds.add(node.id)  # a module-level variable

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if not is_super_call(node.value):  # ``super().f()`` runs a base's: a use of the base
            self.uses.add(node.attr)
        if type(node.ctx) is not ast.Load and not _on_self(node):
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
            if self.depth == 0:
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
    edit = _edited_unit(previous, lines)
    if edit is None:
        return None
    index, delta = edit
    old = previous.units[index]
    fresh = _parse_unit(lines, old.start, old.end + delta)
    if fresh is None:
        return None
    units = (
        *previous.units[:index],
        *fresh,
        *(u.shifted(delta) for u in previous.units[index + 1 :]),
    )
    checked = _linked(previous, index, fresh, delta)
    if checked is None:
        return None
    # positions in the new text: units before the edit keep theirs, later ones move
    new_index = {i: (i if i < index else i - 1 + len(fresh)) for i in checked}
    kept_units = [units[new_index[i]] for i in checked] + list(fresh)
    reduced = _reduced(lines, [u for u in units if u.is_import] + kept_units)
    try:
        lint = FileLint(reduced, rules=previous.rules, path=previous.path, lazy_fixes=True)
    except Exception:  # a syntax error the unit alone did not show: the full lint says it
        return None
    if lint.crashes:
        return None  # the full lint reports the crash
    rechecked = [f for f in lint.findings if _inside(f, kept_units)]
    carried = [
        _moved(f, old.end, delta)
        for f in previous.findings
        if not _inside(f, [old, *(previous.units[i] for i in checked)])
    ]
    findings = tuple(sorted(rechecked + carried, key=_order))
    return Snapshot(source, lines, units, findings, previous.rules, previous.path)


def _edited_unit(previous: Snapshot, lines: tuple[str, ...]) -> tuple[int, int] | None:
    """The unit holding every changed line, and the lines the edit adds (negative when it
    removes); ``None`` when the change is outside a unit, spans two, or is an import."""
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
    for index, unit in enumerate(previous.units):
        # an insertion (last < first) goes strictly inside the unit, between two of its lines
        inside = (
            unit.start <= first and last <= unit.end
            if last >= first
            else (unit.start < first <= unit.end)
        )
        if inside:
            return None if unit.imports else (index, len(lines) - len(old))
    return None


def _parse_unit(lines: tuple[str, ...], start: int, end: int) -> tuple[Unit, ...] | None:
    """The units of the new text's lines ``start``..``end``, parsed alone at their place;
    ``None`` when they do not parse alone or hold an import."""
    if end < start:
        return None
    text = "\n" * (start - 1) + "".join(lines[start - 1 : end])
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    units = units_of(tree.body)
    return None if any(u.imports for u in units) else units


def _linked(
    previous: Snapshot, index: int, fresh: tuple[Unit, ...], delta: int
) -> list[int] | None:
    """The indices (in ``previous.units``) of the units to check again with the edited
    one: those linked to it by names, transitively, and, when lines moved, those whose
    findings cite a line. ``None`` when they are too many for the check to pay."""
    units = previous.units
    binders: _Index = {}
    users: _Index = {}
    for i, unit in enumerate(units):
        if i == index or unit.is_import:
            continue
        for name in unit.binds:
            binders.setdefault(name, []).append(i)
        for name in unit.uses:
            users.setdefault(name, []).append(i)
    seeds = [units[index], *fresh]
    pending = [i for seed in seeds for i in _neighbours(seed, binders, users)]
    if delta:
        pending += _citing_lines(previous, index)
    found: set[int] = set()
    budget = max(MAX_SHARE * len(previous.lines), MIN_BUDGET)
    size = sum(u.end - u.start + 1 for u in fresh)
    while pending:
        i = pending.pop()
        if i in found:
            continue
        found.add(i)
        size += units[i].end - units[i].start + 1
        if size > budget:
            return None
        pending += _neighbours(units[i], binders, users)
    return sorted(found)


def _neighbours(unit: Unit, binders: _Index, users: _Index) -> list[int]:
    found = [i for name in unit.uses for i in binders.get(name, ())]
    return found + [i for name in unit.binds for i in users.get(name, ())]


def _citing_lines(previous: Snapshot, index: int) -> list[int]:
    cited = [f for f in previous.findings if _CITES_LINE.search(f.message)]
    return [
        i
        for i, unit in enumerate(previous.units)
        if i != index and any(unit.start <= f.line <= unit.end for f in cited)
    ]


def _reduced(lines: tuple[str, ...], kept: list[Unit]) -> str:
    """The text with the lines of every unit not in ``kept`` left empty."""
    keep = bytearray(len(lines) + 2)
    for unit in kept:
        keep[unit.start : unit.end + 1] = b"\x01" * (unit.end - unit.start + 1)
    return "".join(line if keep[number] else "\n" for number, line in enumerate(lines, start=1))


def _inside(finding: Finding, units: Sequence[Unit]) -> bool:
    return any(unit.start <= finding.line <= unit.end for unit in units)


def _moved(finding: Finding, after: int, delta: int) -> Finding:
    if not delta or finding.line <= after:
        return finding
    return dataclasses.replace(
        finding, line=finding.line + delta, end_line=finding.end_line + delta
    )


def _order(finding: Finding) -> tuple[int, int, str]:
    return (finding.line, finding.col, finding.code)
