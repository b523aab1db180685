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

from collections.abc import Sequence
from dataclasses import dataclass

import libcst as cst

from gradfix.analysis import FileAnalysis, LeafReason
from gradfix.inplace import changes_in_place
from gradfix.rule import Edit, Fix, FixSafety, Rule, RuleContext
from gradfix.torch_facts import NON_GRAPH_CALLS, NOT_GRAPH_USES, is_inplace_method
from gradfix.walk import walk


@dataclass
class Site:
    """One in-place update: the small statement, the tensor it changes, why it is reported.

    ``replacement`` is what the statement becomes inside the ``no_grad`` block (None: kept
    as is); ``fixable`` False reports it without a fix and ends the run of updates.
    """

    statement: cst.BaseSmallStatement
    target: cst.BaseExpression
    reason: LeafReason | None = None
    fixable: bool = True
    replacement: cst.BaseSmallStatement | None = None
    safety: FixSafety = FixSafety.SAFE


class NoGradBlockRule(Rule):
    """Base of rules whose fix wraps in-place updates in ``with torch.no_grad():``."""

    def __init__(self, context: RuleContext) -> None:
        super().__init__(context)
        self._wrapped_blocks: set[int] = set()

    def site(self, small: cst.BaseSmallStatement) -> Site | None:
        """The update ``small`` performs, if it is one this rule reports."""
        raise NotImplementedError

    def site_message(self, site: Site) -> str:
        raise NotImplementedError

    def visit_Module(self, node: cst.Module) -> None:
        self._check_block(node.body)

    def visit_IndentedBlock(self, node: cst.IndentedBlock) -> None:
        self._check_block(node.body)

    # -- blocks and runs -----------------------------------------------------------------
    def _check_block(self, body: Sequence[cst.BaseStatement]) -> None:
        if id(body) in self._wrapped_blocks:
            return
        run: list[tuple[cst.BaseStatement, list[Site]]] = []
        pending: list[tuple[cst.BaseStatement, list[Site]]] = []
        for stmt in body:
            sites = self._statement_sites(stmt)
            if sites and all(s.fixable for s in sites):
                run.extend(pending)
                pending = []
                run.append((stmt, sites))
            elif sites is None and run and is_grad_housekeeping(stmt):
                pending.append((stmt, []))
            else:
                self._report_run(run)
                run, pending = [], []
                for site in sites or []:
                    self.report(site.statement, self.site_message(site))
        self._report_run(run)

    def _statement_sites(self, stmt: cst.BaseStatement) -> list[Site] | None:
        """The in-place updates ``stmt`` consists of (None if it is something else).

        A loop or ``if`` whose blocks only hold updates counts as a whole, so that
        ``for p in model.parameters(): p.normal_()`` is wrapped in one block.
        """
        if isinstance(stmt, cst.SimpleStatementLine):
            sites = [self.site(small) for small in stmt.body]
            found = [s for s in sites if s is not None]
            if found and len(found) < len(stmt.body):
                for site in found:
                    site.fixable = False  # mixed with other statements on the line
            return found or None
        if isinstance(stmt, (cst.For, cst.While)) and stmt.orelse is None:
            return self._blocks_sites([stmt.body])
        if isinstance(stmt, cst.If):
            blocks: list[cst.BaseSuite] = [stmt.body]
            orelse = stmt.orelse
            while isinstance(orelse, cst.If):
                blocks.append(orelse.body)
                orelse = orelse.orelse
            if isinstance(orelse, cst.Else):
                blocks.append(orelse.body)
            return self._blocks_sites(blocks)
        return None

    def _blocks_sites(self, blocks: Sequence[cst.BaseSuite]) -> list[Site] | None:
        """All sites of ``blocks`` if they hold nothing but fixable in-place updates."""
        collected: list[Site] = []
        for block in blocks:
            if isinstance(block, cst.SimpleStatementSuite):
                line_sites = [self.site(small) for small in block.body]
                found = [s for s in line_sites if s is not None and s.fixable]
                if len(found) < len(line_sites):
                    return None
                collected.extend(found)
                continue
            assert isinstance(block, cst.IndentedBlock)
            for stmt in block.body:
                sites = self._statement_sites(stmt)
                if sites is None and is_grad_housekeeping(stmt):
                    continue
                if not sites or not all(s.fixable for s in sites):
                    return None
                collected.extend(sites)
        if not collected:
            return None
        for block in blocks:
            if isinstance(block, cst.IndentedBlock):
                self._wrapped_blocks.add(id(block.body))
        return collected

    def _report_run(self, run: list[tuple[cst.BaseStatement, list[Site]]]) -> None:
        if not run:
            return
        statements = [stmt for stmt, _ in run]
        sites = [site for _, stmt_sites in run for site in stmt_sites]
        fix = self.wrap_in_no_grad(statements, sites)
        for site in sites:
            self.report(site.statement, self.site_message(site), fix=fix)

    # -- the fix -------------------------------------------------------------------------
    def wrap_in_no_grad(self, statements: list[cst.BaseStatement], sites: list[Site]) -> Fix:
        """One fix wrapping ``statements`` (the sites rewritten) in ``with torch.no_grad():``."""
        replacements = {id(s.statement): s.replacement for s in sites if s.replacement}
        rewritten = [_replace_nodes(stmt, replacements) for stmt in statements]
        first = rewritten[0]
        assert isinstance(first, (cst.SimpleStatementLine, cst.BaseCompoundStatement))
        inner = [first.with_changes(leading_lines=()), *rewritten[1:]]
        block = cst.With(
            items=[cst.WithItem(cst.Call(self.analysis.torch_attr("no_grad")))],
            body=cst.IndentedBlock(body=inner),
            leading_lines=first.leading_lines,
        )
        edits = [Edit(statements[0], block)]
        edits += [Edit(stmt, cst.RemovalSentinel.REMOVE) for stmt in statements[1:]]
        imports = () if self.analysis.torch_alias() else ("torch",)
        unsafe = any(site.safety is FixSafety.UNSAFE for site in sites)
        safety = FixSafety.UNSAFE if unsafe else None
        description = "Wrap in `torch.no_grad()`"
        return self.fix(edits, description, safety=safety, imports=imports, joinable=True)


def inplace_target(small: cst.BaseSmallStatement) -> cst.BaseExpression | None:
    """The tensor a statement modifies in place (``w.normal_()``, ``w -= g``, ``w[:] = 0``)."""
    if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
        call: cst.BaseExpression = small.value
        modified = None
        # ``w.normal_().mul_(0.1)``: the innermost receiver is modified.
        while isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute):
            if not is_inplace_method(call.func.attr.value):
                break
            call = modified = call.func.value
        return modified
    if isinstance(small, cst.AugAssign):
        return small.target if changes_in_place(small) else None
    if isinstance(small, cst.Assign) and isinstance(small.targets[0].target, cst.Subscript):
        return small.targets[0].target
    return None


def is_grad_housekeeping(stmt: cst.BaseStatement) -> bool:
    """``w.grad.zero_()`` / ``w.grad = None``: harmless inside or outside ``no_grad``."""
    if not isinstance(stmt, cst.SimpleStatementLine):
        return False
    for small in stmt.body:
        target: cst.BaseExpression | None = None
        if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
            func = small.value.func
            target = func.value if isinstance(func, cst.Attribute) else None
        elif isinstance(small, cst.Assign):
            target = small.targets[0].target
        if not (isinstance(target, cst.Attribute) and target.attr.value == "grad"):
            return False
    return True


def used_in_graph_before(
    analysis: FileAnalysis, tensor: cst.BaseExpression, at: cst.CSTNode
) -> bool:
    """A graph use of ``tensor`` precedes ``at`` in its scope with no backward between."""
    scope = analysis.scope_of(at)
    start = analysis.index(scope.node)
    binding = analysis.reaching_binding(tensor, at) if isinstance(tensor, cst.Name) else None
    if binding is not None:
        start = binding.end
    end = analysis.index(analysis.enclosing_statement(at) or at)
    finder = _ReadsAndBackwards(tensor, analysis)
    walk(scope.node, finder)
    uses = [u for u in finder.uses if start < analysis.index(u) < end]
    if not uses:
        return False
    last_use = max(analysis.index(u) for u in uses)
    return not any(last_use < analysis.index(b) < end for b in finder.backwards)


def _replace_nodes(
    stmt: cst.BaseStatement, replacements: dict[int, cst.BaseSmallStatement]
) -> cst.BaseStatement:
    if not replacements:
        return stmt
    result = stmt.visit(_NodeReplacer(replacements))
    assert isinstance(result, cst.BaseStatement)
    return result


class _NodeReplacer(cst.CSTTransformer):
    def __init__(self, replacements: dict[int, cst.BaseSmallStatement]) -> None:
        super().__init__()
        self.replacements = replacements

    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode):  # type: ignore[no-untyped-def]
        return self.replacements.get(id(original_node), updated_node)


class _ReadsAndBackwards(cst.CSTVisitor):
    """Graph uses of one tensor expression, and backward calls, inside a scope."""

    def __init__(self, tensor: cst.BaseExpression, analysis: FileAnalysis) -> None:
        self.key = cst.Module([]).code_for_node(tensor)
        self.analysis = analysis
        self.uses: list[cst.CSTNode] = []
        self.backwards: list[cst.CSTNode] = []

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value in ("backward", "step"):
            self.backwards.append(node)
        elif isinstance(func, cst.Attribute) and func.attr.value == "grad":
            self.backwards.append(node)  # torch.autograd.grad(...)

    def on_visit(self, node: cst.CSTNode) -> bool:
        super().on_visit(node)
        if isinstance(node, (cst.Name, cst.Attribute)) and self._matches(node):
            if self._is_graph_use(node):
                self.uses.append(node)
            return False
        return True

    def _matches(self, node: cst.CSTNode) -> bool:
        if isinstance(node, cst.Name):
            return node.value == self.key
        return "." in self.key and cst.Module([]).code_for_node(node) == self.key

    def _is_graph_use(self, node: cst.CSTNode) -> bool:
        analysis = self.analysis
        parent = analysis.parent(node)
        if isinstance(parent, cst.Attribute) and parent.value is node:
            attribute = parent.attr.value
            return attribute not in NOT_GRAPH_USES and not is_inplace_method(attribute)
        if isinstance(parent, (cst.AssignTarget, cst.AugAssign)):
            return False
        if analysis.in_no_grad(node):
            return False
        for ancestor in analysis.ancestors(node):
            if isinstance(ancestor, cst.Call):
                callee = ancestor.func
                name = analysis.call_name(ancestor) or ""
                if name.startswith(("torch.optim", "torch.nn.init", "torch.nn.Parameter")):
                    return False
                if isinstance(callee, cst.Name) and callee.value in NON_GRAPH_CALLS:
                    return False
                return True
            if isinstance(ancestor, (cst.BinaryOperation, cst.UnaryOperation, cst.Subscript)):
                return True
            if isinstance(ancestor, cst.BaseSmallStatement):
                return False
        return False
