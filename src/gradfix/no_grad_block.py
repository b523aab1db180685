"""Wrapping in-place updates in ``with torch.no_grad():`` blocks (GF201, GF205).

:class:`NoGradBlockRule` walks every block of a module, asks the subclass which small
statements are in-place updates (:meth:`NoGradBlockRule.site`), and reports each run of
consecutive updates with one fix that wraps the run in a single ``with torch.no_grad():``.
A loop or ``if`` whose body holds nothing but updates (and ``.grad`` housekeeping) is
wrapped whole, so ``for p in model.parameters(): p.normal_()`` gets one block. A site may
carry a replacement for its statement (GF205 drops ``.data``): it is applied inside the
new block. The fix is joinable: the engine merges the new block with an adjacent
``with torch.no_grad():`` (the user's, another rule's, an earlier pass's), so updates
next to each other end up in one block whichever rule or pass fixed them.
"""

from __future__ import annotations

import ast
import bisect
import functools
import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import libcst as cst

from gradfix.edits import Editor
from gradfix.rule import Edit, FixPlan, FixSafety, Rule, RuleContext
from gradfix.semantic import LeafReason, Semantic
from gradfix.torch_facts import NON_GRAPH_CALLS, NOT_GRAPH_USES, is_inplace_method

#: Builds, on the LibCST tree, what a site's small statement becomes inside the block
#: (None: no fix). It gets the statement's LibCST node.
Rewrite = Callable[[Editor, "cst.BaseSmallStatement"], "cst.BaseSmallStatement | None"]
#: One statement of a block as LibCST sees it: the simple statements of one line
#: (``a; b``), or a compound statement alone.
Line = list[ast.stmt]

_COMPOUND = (
    ast.For,
    ast.AsyncFor,
    ast.While,
    ast.If,
    ast.With,
    ast.AsyncWith,
    ast.Try,
    ast.FunctionDef,
    ast.AsyncFunctionDef,
    ast.ClassDef,
    ast.Match,
    *((ast.TryStar,) if hasattr(ast, "TryStar") else ()),
)
#: Nothing but layout between two tokens (``\\`` continues a line).
_BLANK = b" \t\x0c\r\n\\"


@dataclass
class Site:
    """One in-place update: the simple statement, the tensor it changes, why it is reported.

    ``replacement`` rewrites the statement inside the ``no_grad`` block (None: kept as
    is); ``fixable`` False reports it without a fix and ends the run of updates.
    """

    statement: ast.stmt
    target: ast.expr
    reason: LeafReason | None = None
    fixable: bool = True
    replacement: Rewrite | None = None
    safety: FixSafety = FixSafety.SAFE


class SourceText:
    """The text of ``ast`` nodes as LibCST prints them (``ast`` counts UTF-8 bytes)."""

    def __init__(self, source: str) -> None:
        self.data = source.encode("utf-8")
        lengths = map(len, self.data.splitlines(keepends=True))
        self.starts = list(itertools.accumulate(lengths, initial=0))

    @staticmethod
    @functools.lru_cache(maxsize=1)
    def of(source: str) -> SourceText:
        """The text of ``source``, built once for the rules that share it (read only)."""
        return SourceText(source)

    def start(self, node: ast.AST) -> int:
        return self.starts[node.lineno - 1] + node.col_offset  # type: ignore[attr-defined]

    def end(self, node: ast.AST) -> int:
        return self.starts[node.end_lineno - 1] + node.end_col_offset  # type: ignore[attr-defined]

    def text(self, start: int, end: int) -> str:
        return self.data[start:end].decode("utf-8", errors="replace")

    def code(self, node: ast.expr, parent: ast.AST | None) -> str:
        """``node`` with its own parentheses (``(w)`` in ``(w).normal_()``), as
        ``code_for_node`` printed it; a call's parentheses around its lone argument are
        the call's."""
        start, end = self.start(node), self.end(node)
        owned = self._enclosing_parentheses(start, end)
        if owned and _is_lone_argument(node, parent):
            owned -= 1
        for _ in range(owned):
            start = self.data.rindex(b"(", 0, start)
            end = self.data.index(b")", end) + 1
        return self.text(start, end)

    def _enclosing_parentheses(self, start: int, end: int) -> int:
        count = 0
        while True:
            before, after = self._skip_back(start), self._skip_forward(end)
            if not (
                self.data[before - 1 : before] == b"(" and self.data[after : after + 1] == b")"
            ):
                return count
            start, end = before - 1, after + 1
            count += 1

    def _skip_back(self, position: int) -> int:
        """The offset after the last token before ``position`` (layout skipped)."""
        while position > 0 and self.data[position - 1] in _BLANK:
            position -= 1
        return position

    def _skip_forward(self, position: int) -> int:
        """The offset of the first token from ``position`` on (layout skipped)."""
        while position < len(self.data) and self.data[position] in _BLANK:
            position += 1
        return position

    def statement_code(self, stmt: ast.stmt) -> str:
        """A simple statement with the ``;`` that ends it (LibCST's small statement)."""
        start, end = self.start(stmt), self.end(stmt)
        token = self._skip_forward(end)
        gap = self.data[end:token].replace(b"\\\r\n", b"").replace(b"\\\n", b"")
        if self.data[token : token + 1] == b";" and b"\n" not in gap and b"\r" not in gap:
            end = token + 1
            # the whitespace after ``;`` is the semicolon's, a line continuation too
            while self.data[end : end + 1] in (b" ", b"\t", b"\x0c", b"\\"):
                end += 2 if self.data[end : end + 1] == b"\\" else 1
        return self.text(start, end)

    def same_line(self, first: ast.stmt, second: ast.stmt) -> bool:
        """``first; second``: two simple statements of one LibCST statement line."""
        between = self.text(self.end(first), self.start(second))
        between = between.replace("\\\r\n", "").replace("\\\n", "")
        return ";" in between and "\n" not in between and "\r" not in between and "#" not in between

    def starts_line(self, stmt: ast.stmt) -> bool:
        """``stmt`` begins its line: a block's first statement there is an indented block
        (after ``if x: a`` the statements are a one-line suite)."""
        line_start = self.starts[stmt.lineno - 1]
        return not self.data[line_start : self.start(stmt)].strip()


def _is_lone_argument(node: ast.expr, parent: ast.AST | None) -> bool:
    if type(parent) is ast.Call:
        return parent.func is not node and len(parent.args) + len(parent.keywords) == 1
    if type(parent) is ast.ClassDef:
        return len(parent.bases) + len(parent.keywords) == 1
    return False


def lines_of(body: Sequence[ast.stmt], source: SourceText) -> list[Line]:
    """The statements of a block as LibCST lists them: ``a; b`` is one line."""
    lines: list[Line] = []
    for stmt in body:
        if lines and _joined(lines[-1][-1], stmt, source):
            lines[-1].append(stmt)
        else:
            lines.append([stmt])
    return lines


def _joined(previous: ast.stmt, stmt: ast.stmt, source: SourceText) -> bool:
    """``previous; stmt``: the two simple statements share one LibCST line."""
    return (
        not isinstance(stmt, _COMPOUND)
        and not isinstance(previous, _COMPOUND)
        and source.same_line(previous, stmt)
    )


def line_start(analysis: Semantic, stmt: ast.stmt, source: SourceText) -> ast.stmt:
    """The first statement of the line holding ``stmt`` (``a`` of ``a; stmt``); in a
    one-line suite (``if x: a; stmt``) the compound statement, as LibCST sees it."""
    parent = analysis.parent(stmt)
    found = _body_holding(analysis, parent, stmt)
    if found is None:
        return stmt
    body, position = found
    if not source.starts_line(body[0]):
        return analysis.enclosing_statement(parent) or stmt  # type: ignore[arg-type]
    # walking back from ``stmt`` (not grouping the whole block, as :func:`lines_of`
    # does) keeps a block of N findings linear
    while position > 0 and _joined(body[position - 1], body[position], source):
        position -= 1
    return body[position]


def _body_holding(
    analysis: Semantic, parent: ast.AST | None, stmt: ast.stmt
) -> tuple[list[ast.stmt], int] | None:
    """The block of ``parent`` holding ``stmt``, and where ``stmt`` is in it."""
    if parent is None:
        return None
    for _, value in ast.iter_fields(parent):
        if type(value) is list:
            position = _position_in(analysis, value, stmt)
            if position is not None:
                return value, position
    return None


def _position_in(analysis: Semantic, items: list[ast.AST], node: ast.AST) -> int | None:
    """The index of ``node`` in ``items`` (by identity); a binary search on the source
    order, since the children of a field come in that order."""
    try:
        key, low, high = analysis.index(node), 0, len(items)
        while low < high:
            middle = (low + high) // 2
            if analysis.index(items[middle]) < key:
                low = middle + 1
            else:
                high = middle
    except KeyError:  # a node outside the analysis's order: look at each item
        return next((i for i, item in enumerate(items) if item is node), None)
    return low if low < len(items) and items[low] is node else None


class NoGradBlockRule(Rule):
    """Base of rules whose fix wraps in-place updates in ``with torch.no_grad():``."""

    def __init__(self, context: RuleContext) -> None:
        super().__init__(context)
        self.source = SourceText.of(context.source)
        self._wrapped_blocks: set[int] = set()
        self._graph_uses: dict[tuple[ast.AST, str], tuple[list[int], list[int]]] = {}

    def site(self, small: ast.stmt) -> Site | None:
        """The update the simple statement ``small`` performs, if this rule reports it."""
        raise NotImplementedError

    def site_message(self, site: Site) -> str:
        raise NotImplementedError

    def may_be_site(self, small: ast.stmt) -> bool:
        """A cheap necessary condition of ``site(small)``: blocks without such a statement
        at any depth are not checked (most blocks of a file)."""
        return inplace_target(small) is not None

    def visit_Module(self, node: ast.Module) -> None:
        self._holding_sites = self._holders_of_possible_sites()
        if node in self._holding_sites:
            self._check_block(node.body)

    def _holders_of_possible_sites(self) -> set[ast.AST]:
        """The module and compound statements around a statement that may be a site."""
        analysis = self.analysis
        holders: set[ast.AST] = set()
        for kind in (ast.Expr, ast.AugAssign, ast.Assign):
            for small in analysis.by_type.get(kind, ()):
                if self.may_be_site(small):  # type: ignore[arg-type]
                    for ancestor in analysis.ancestors(small):
                        if ancestor in holders:
                            break  # and so are its own ancestors
                        holders.add(ancestor)
        return holders

    def _visit_compound(self, node: ast.stmt) -> None:
        if node not in self._holding_sites:
            return
        for block in _blocks(node, self.source):
            if block and self.source.starts_line(block[0]):
                self._check_block(block)

    visit_For = visit_AsyncFor = visit_While = visit_If = _visit_compound
    visit_With = visit_AsyncWith = visit_Try = visit_TryStar = _visit_compound
    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _visit_compound
    visit_Match = _visit_compound

    def graph_uses(self, scope: ast.AST, key: str) -> tuple[list[int], list[int]]:
        """The positions (:meth:`Semantic.index`, sorted) of the graph uses of the tensor
        spelled ``key`` in ``scope``, and of its backward calls: searched once per scope
        and tensor, however many updates of it are asked about (N updates: N searches
        made a block of N findings quadratic)."""
        found = self._graph_uses.get((scope, key))
        if found is None:
            finder = _ReadsAndBackwards(self, key)
            finder.search(scope)
            index = self.analysis.index
            found = sorted(map(index, finder.uses)), sorted(map(index, finder.backwards))
            self._graph_uses[(scope, key)] = found
        return found

    def text_of(self, node: ast.expr) -> str:
        """The text of ``node`` with its own parentheses (what LibCST printed)."""
        return self.source.code(node, self.analysis.parent(node))

    # -- blocks and runs -----------------------------------------------------------------
    def _check_block(self, body: list[ast.stmt]) -> None:
        if id(body) in self._wrapped_blocks:
            return
        run: list[tuple[Line, list[Site]]] = []
        pending: list[tuple[Line, list[Site]]] = []
        for line in lines_of(body, self.source):
            sites = self._statement_sites(line)
            if sites and all(s.fixable for s in sites):
                run.extend(pending)
                pending = []
                run.append((line, sites))
            elif sites is None and run and is_grad_housekeeping(line):
                pending.append((line, []))
            else:
                self._report_run(run)
                run, pending = [], []
                for site in sites or []:
                    self.report(site.statement, self.site_message(site))
        self._report_run(run)

    def _statement_sites(self, line: Line) -> list[Site] | None:
        """The in-place updates ``line`` consists of (None if it is something else).

        A loop or ``if`` whose blocks only hold updates counts as a whole, so that
        ``for p in model.parameters(): p.normal_()`` is wrapped in one block.
        """
        stmt = line[0]
        if not isinstance(stmt, _COMPOUND):
            sites = [self.site(small) for small in line]
            found = [s for s in sites if s is not None]
            if found and len(found) < len(line):
                for site in found:
                    site.fixable = False  # mixed with other statements on the line
            return found or None
        if isinstance(stmt, (ast.For, ast.AsyncFor, ast.While)) and not stmt.orelse:
            return self._blocks_sites([stmt.body])
        if isinstance(stmt, ast.If):
            blocks = [stmt.body]
            orelse = stmt.orelse
            while _is_elif(orelse, self.source):
                elif_ = orelse[0]
                assert isinstance(elif_, ast.If)
                blocks.append(elif_.body)
                orelse = elif_.orelse
            if orelse:
                blocks.append(orelse)
            return self._blocks_sites(blocks)
        return None

    def _blocks_sites(self, blocks: Sequence[list[ast.stmt]]) -> list[Site] | None:
        """All sites of ``blocks`` if they hold nothing but fixable in-place updates."""
        collected: list[Site] = []
        for block in blocks:
            if not self.source.starts_line(block[0]):  # ``if x: a; b``: one line
                line_sites = [self.site(small) for small in block]
                found = [s for s in line_sites if s is not None and s.fixable]
                if len(found) < len(line_sites):
                    return None
                collected.extend(found)
                continue
            for line in lines_of(block, self.source):
                sites = self._statement_sites(line)
                if sites is None and is_grad_housekeeping(line):
                    continue
                if not sites or not all(s.fixable for s in sites):
                    return None
                collected.extend(sites)
        if not collected:
            return None
        for block in blocks:
            if self.source.starts_line(block[0]):
                self._wrapped_blocks.add(id(block))
        return collected

    def _report_run(self, run: list[tuple[Line, list[Site]]]) -> None:
        if not run:
            return
        statements = [line[0] for line, _ in run]
        sites = [site for _, line_sites in run for site in line_sites]
        fix = self._wrap_plan(statements, sites)
        for site in sites:
            self.report(site.statement, self.site_message(site), fix=fix)

    # -- the fix -------------------------------------------------------------------------
    def _wrap_plan(self, statements: list[ast.stmt], sites: list[Site]) -> FixPlan:
        """One fix wrapping the lines of ``statements`` (the sites rewritten) in
        ``with torch.no_grad():``."""

        def build(editor: Editor) -> list[Edit] | None:
            replacements: dict[cst.CSTNode, cst.CSTNode] = {}
            for site in sites:
                if site.replacement is None:
                    continue
                small = editor.node(site.statement)
                assert isinstance(small, cst.BaseSmallStatement)
                new = site.replacement(editor, small)
                if new is None:
                    return None
                replacements[small] = new
            lines = [editor.statement(stmt) for stmt in statements]
            return editor.wrap_in_no_grad(lines, replacements)

        imports = () if self.analysis.torch_alias() else ("torch",)
        unsafe = any(site.safety is FixSafety.UNSAFE for site in sites)
        safety = FixSafety.UNSAFE if unsafe else None
        description = "Wrap in `torch.no_grad()`"
        return self.plan(build, description, safety=safety, imports=imports, joinable=True)


def _blocks(node: ast.stmt, source: SourceText) -> list[list[ast.stmt]]:
    """The blocks of a compound statement (an ``elif`` is visited as its own ``if``)."""
    if isinstance(node, ast.If):
        return [node.body] + ([] if _is_elif(node.orelse, source) else [node.orelse])
    if isinstance(node, ast.Match):
        return [case.body for case in node.cases]
    blocks = [node.body]  # type: ignore[attr-defined]
    blocks += [handler.body for handler in getattr(node, "handlers", ())]
    blocks += [getattr(node, "orelse", []), getattr(node, "finalbody", [])]
    return blocks


def _is_elif(orelse: list[ast.stmt], source: SourceText) -> bool:
    if len(orelse) != 1 or not isinstance(orelse[0], ast.If):
        return False
    start = source.start(orelse[0])
    return source.data.startswith(b"elif", start)


def inplace_target(small: ast.stmt) -> ast.expr | None:
    """The tensor a statement modifies in place (``w.normal_()``, ``w -= g``, ``w[:] = 0``)."""
    if type(small) is ast.Expr:
        return inplace_receiver(small.value)
    if type(small) is ast.AugAssign:
        return small.target if changes_in_place(small) else None
    if type(small) is ast.Assign and type(small.targets[0]) is ast.Subscript:
        return small.targets[0]
    return None


def inplace_receiver(expr: ast.expr) -> ast.expr | None:
    """The tensor a call of in-place methods changes: ``w`` of ``w.normal_().mul_(0.1)``
    (the innermost receiver)."""
    modified = None
    while type(expr) is ast.Call and type(expr.func) is ast.Attribute:
        if not is_inplace_method(expr.func.attr):
            break
        expr = modified = expr.func.value
    return modified


def changes_in_place(node: ast.AugAssign) -> bool:
    """``h += 1`` changes the tensor ``h`` in place; ``h @= m`` rebinds ``h``."""
    return type(node.op) is not ast.MatMult


def is_grad_housekeeping(line: Line) -> bool:
    """``w.grad.zero_()`` / ``w.grad = None``: harmless inside or outside ``no_grad``."""
    if isinstance(line[0], _COMPOUND):
        return False
    for small in line:
        target: ast.expr | None = None
        if type(small) is ast.Expr and type(small.value) is ast.Call:
            func = small.value.func
            target = func.value if type(func) is ast.Attribute else None
        elif type(small) is ast.Assign:
            target = small.targets[0]
        if not (type(target) is ast.Attribute and target.attr == "grad"):
            return False
    return True


def used_in_graph_before(rule: NoGradBlockRule, tensor: ast.expr, at: ast.AST) -> bool:
    """A graph use of ``tensor`` precedes ``at`` in its scope with no backward between."""
    analysis = rule.analysis
    scope = analysis.scope_of(at)
    start = analysis.index(scope.node)
    binding = analysis.reaching_binding(tensor, at) if type(tensor) is ast.Name else None
    if binding is not None:
        start = binding.end
    statement = analysis.enclosing_statement(at)
    end = analysis.index(line_start(analysis, statement, rule.source) if statement else at)
    uses, backwards = rule.graph_uses(scope.node, rule.text_of(tensor))
    last = bisect.bisect_left(uses, end) - 1
    if last < 0 or uses[last] <= start:
        return False
    after_use = bisect.bisect_right(backwards, uses[last])
    return not (after_use < len(backwards) and backwards[after_use] < end)


class _ReadsAndBackwards:
    """Graph uses of one tensor expression, and backward calls, inside a scope.

    It matches what LibCST calls names: besides variables, an attribute's name, a
    keyword and a parameter spelled like the tensor (``self.w`` for ``w``)."""

    def __init__(self, rule: NoGradBlockRule, key: str) -> None:
        self.rule = rule
        self.analysis = rule.analysis
        self.key = key
        self.dotted = "." in key
        self.last_attr = key.rpartition(".")[2]
        self.uses: list[ast.AST] = []
        self.backwards: list[ast.AST] = []

    def search(self, root: ast.AST) -> None:
        """Records the uses and backward calls under ``root``: from the analysis's index of
        spellings (what ``_visit`` records spells the key's last name, or is a call of a
        ``backward`` / ``step`` / ``grad`` attribute), nothing is walked."""
        analysis = self.analysis
        for node in analysis.spellings_in(root, self.last_attr):
            self._visit(node)
        for attr in ("backward", "step", "grad"):
            for node in analysis.spellings_in(root, attr):
                parent = analysis.parent(node)
                if type(node) is ast.Attribute and type(parent) is ast.Call:
                    if parent.func is node and analysis.contains(root, parent):
                        self.backwards.append(parent)

    def _visit(self, node: ast.AST) -> None:
        """Records ``node`` when it is a graph use of the key."""
        if isinstance(node, ast.Name):
            if node.id == self.key and self._is_graph_use(node):
                self.uses.append(node)
        elif isinstance(node, ast.Attribute):
            if not self.dotted:
                if node.attr == self.key and self._is_name_graph_use(node):
                    self.uses.append(node)
            elif node.attr == self.last_attr and self.rule.text_of(node) == self.key:
                if self._is_graph_use(node):
                    self.uses.append(node)
        elif isinstance(node, (ast.keyword, ast.arg)):
            if node.arg == self.key and self._is_name_graph_use(node):
                self.uses.append(node)

    def _is_graph_use(self, node: ast.expr) -> bool:
        if _is_changed_through_index(self.analysis, node):
            return False  # ``w[:, k] -= v``: another in-place update, not a read
        parent = self.analysis.parent(node)
        if type(parent) is ast.Attribute and parent.value is node:
            attribute = parent.attr
            return attribute not in NOT_GRAPH_USES and not is_inplace_method(attribute)
        if type(parent) is ast.Assign and any(t is node for t in parent.targets):
            return False
        if type(parent) is ast.AugAssign:
            return False
        return self._is_name_graph_use(node, holds_name=False)

    def _is_name_graph_use(self, holder: ast.AST, holds_name: bool = True) -> bool:
        """A name inside ``holder`` (itself, or its attribute's, keyword's, parameter's
        name) is read by the graph: it flows into a call or an operation."""
        analysis = self.analysis
        if analysis.in_no_grad(holder):
            return False
        for ancestor in _ancestors(analysis, holder, holds_name):
            kind = type(ancestor)
            if kind is ast.Call:
                callee = ancestor.func  # type: ignore[attr-defined]
                name = analysis.call_name(ancestor) or ""  # type: ignore[arg-type]
                if name.startswith(("torch.optim", "torch.nn.init", "torch.nn.Parameter")):
                    return False
                if type(callee) is ast.Name and callee.id in NON_GRAPH_CALLS:
                    return False
                return True
            if kind is ast.BinOp or kind is ast.UnaryOp or kind is ast.Subscript:
                return True
            if isinstance(ancestor, ast.stmt) and not isinstance(ancestor, _COMPOUND):
                return False
        return False


def _is_changed_through_index(analysis: Semantic, node: ast.expr) -> bool:
    """``node`` is the base of the target of an index assignment (``w[0] = v``,
    ``w[:, k] -= v``)."""
    top, parent = node, analysis.parent(node)
    while type(parent) is ast.Subscript and parent.value is top:
        top, parent = parent, analysis.parent(parent)
    if top is node:
        return False
    if type(parent) is ast.AugAssign:
        return parent.target is top
    return type(parent) is ast.Assign and any(t is top for t in parent.targets)


def _ancestors(analysis: Semantic, node: ast.AST, holds_name: bool) -> Iterator[ast.AST]:
    """The ancestors of ``node``; of the name it holds (an attribute's, keyword's or
    parameter's name, a LibCST ``Name``) when ``holds_name``: ``node`` comes first."""
    if holds_name:
        yield node
    yield from analysis.ancestors(node)
