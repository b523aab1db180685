"""GF201 leaf-inplace."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import libcst as cst

from gradfix.analysis import LeafReason
from gradfix.rule import Edit, Fix, FixSafety, Invalid, Rule, RuleContext, Valid

#: Methods ending in ``_`` that do not modify the tensor's values.
NOT_INPLACE = frozenset(
    {"requires_grad_", "share_memory_", "detach_", "record_stream_", "retain_grad_"}
)
#: Reading these attributes of a leaf does not put it in the graph.
NON_GRAPH_ATTRIBUTES = frozenset(
    "grad data shape dtype device requires_grad is_leaf grad_fn size dim numel ndim item "
    "tolist detach numpy register_hook retain_grad requires_grad_ nelement element_size".split()
)
NON_GRAPH_CALLS = frozenset(
    "print len id type isinstance repr str list tuple dict set sorted enumerate zip hasattr "
    "getattr setattr format".split()
)


@dataclass
class Site:
    """One in-place update of a leaf: the small statement, the leaf, why it is a leaf."""

    statement: cst.BaseSmallStatement
    target: cst.BaseExpression
    reason: LeafReason
    fixable: bool = True


class LeafInplace(Rule):
    """
    ## What it does
    Finds in-place operations on a leaf tensor that requires grad outside
    `torch.no_grad()`: initialisers (`w.normal_()`, `uniform_`, `fill_`, `zero_`, `copy_`),
    arithmetic (`w.add_(1)`, `w -= lr * w.grad`), and index assignment (`w[:] = 0`),
    including loops over `model.parameters()`, and wraps them in `with torch.no_grad():`.

    ## Why is this bad?
    Autograd forbids changing a leaf that requires grad while it records: the statement
    raises "a leaf Variable that requires grad is being used in an in-place operation"
    (or, for `w[:] = 0`, backward later fails with "leaf variable has been moved into the
    graph interior"). Initialising or updating parameters by hand is an operation
    autograd must not record.

    ## Example
    ```python
    w = torch.empty(3, 4, requires_grad=True)
    w.normal_()  # RuntimeError: a leaf Variable that requires grad ...

    for epoch in range(100):
        loss = ((x @ w - y) ** 2).mean()
        loss.backward()
        w -= lr * w.grad
        w.grad.zero_()
    ```

    ## Use instead
    ```python
    with torch.no_grad():
        w.normal_()

    for epoch in range(100):
        loss = ((x @ w - y) ** 2).mean()
        loss.backward()
        with torch.no_grad():
            w -= lr * w.grad
        w.grad.zero_()
    ```
    Consecutive updates share one block; a loop whose body only updates parameters is
    wrapped whole. `w.data.normal_()` also works, but is the discouraged form (GF205).

    ## Fix safety
    Safe: the statement raised before, and under `no_grad` it does what it says. When the
    leaf was already used in the graph earlier in the same scope with no `backward()` in
    between, the in-place change would corrupt values saved for that graph (a backward-time
    version error, or a silently wrong gradient): reported without a fix. Code already
    under `no_grad()` / `inference_mode()` / a `@torch.no_grad()` function (or a function
    only called from one), `nn.init.*_` functions and tensors that do not require grad are
    not reported.
    """

    code = "GF201"
    name = "leaf-inplace"
    message = "In-place operation on a leaf tensor that requires grad"
    fix_safety = FixSafety.SAFE
    prefilter = ("_(", "=", "[")

    VALID = [
        Valid(
            """
            import torch
            w = torch.empty(3, requires_grad=True)
            with torch.no_grad():
                w.normal_()
            """
        ),
        Valid(
            """
            import torch
            from torch import nn
            lin = nn.Linear(3, 4)
            nn.init.xavier_uniform_(lin.weight)
            nn.init.zeros_(lin.bias)
            """
        ),
        Valid(
            """
            import torch

            @torch.no_grad()
            def sgd_step(params, lr):
                for p in params:
                    p -= lr * p.grad
            """
        ),
        Valid(
            """
            import torch
            buf = torch.zeros(5)
            buf[0] = 1.0
            buf.add_(2)
            """
        ),
        Valid(
            """
            import torch
            w = torch.randn(3, requires_grad=True)
            w.data.normal_()
            w.grad = None
            """
        ),
        Valid(
            """
            import torch
            from torch import nn

            class Net(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.w = nn.Parameter(torch.empty(3))
                    with torch.no_grad():
                        self._reset()

                def _reset(self):
                    self.w.uniform_(-1, 1)
            """
        ),
        Valid(
            """
            import torch
            from torch import nn
            model = nn.Linear(2, 2)
            for name, param in model.named_parameters():
                param.detach_()  # legal on a leaf: it stops requiring grad
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            w = torch.FloatTensor(10)
            w.requires_grad = True
            w.normal_()
            """,
            """
            import torch
            w = torch.FloatTensor(10)
            w.requires_grad = True
            with torch.no_grad():
                w.normal_()
            """,
        ),
        Invalid(
            """
            import torch as th
            w = th.randn(3, requires_grad=True)
            b = th.zeros(1, requires_grad=True)
            for step in range(3):
                loss = (w.sum() + b).pow(2).sum()
                loss.backward()
                # plain SGD
                w -= 0.1 * w.grad
                b -= 0.1 * b.grad  # bias too
                w.grad.zero_()
                b.grad.zero_()
            """,
            """
            import torch as th
            w = th.randn(3, requires_grad=True)
            b = th.zeros(1, requires_grad=True)
            for step in range(3):
                loss = (w.sum() + b).pow(2).sum()
                loss.backward()
                # plain SGD
                with th.no_grad():
                    w -= 0.1 * w.grad
                    b -= 0.1 * b.grad  # bias too
                w.grad.zero_()
                b.grad.zero_()
            """,
        ),
        Invalid(
            """
            from torch import nn
            model = nn.Linear(4, 2)
            for p in model.parameters():
                p.uniform_(-0.1, 0.1)
            """,
            """
            import torch
            from torch import nn
            model = nn.Linear(4, 2)
            with torch.no_grad():
                for p in model.parameters():
                    p.uniform_(-0.1, 0.1)
            """,
        ),
    ]

    def __init__(self, context: RuleContext) -> None:
        super().__init__(context)
        self._wrapped_blocks: set[int] = set()

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
            elif sites is None and run and _is_grad_housekeeping(stmt):
                pending.append((stmt, []))
            else:
                self._report_run(run)
                run, pending = [], []
                for site in sites or []:
                    self.report(site.statement, self._message(site))
        self._report_run(run)

    def _statement_sites(self, stmt: cst.BaseStatement) -> list[Site] | None:
        """The in-place leaf updates ``stmt`` consists of (None if it is something else).

        A loop or ``if`` whose blocks only update leaves in place counts as a whole, so
        that ``for p in model.parameters(): p.normal_()`` is wrapped in one block.
        """
        if isinstance(stmt, cst.SimpleStatementLine):
            sites = [self._site(small) for small in stmt.body]
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
        """All sites of ``blocks`` if they hold nothing but fixable in-place leaf updates."""
        collected: list[Site] = []
        for block in blocks:
            if isinstance(block, cst.SimpleStatementSuite):
                line_sites = [self._site(small) for small in block.body]
                found = [s for s in line_sites if s is not None and s.fixable]
                if len(found) < len(line_sites):
                    return None
                collected.extend(found)
                continue
            assert isinstance(block, cst.IndentedBlock)
            for stmt in block.body:
                sites = self._statement_sites(stmt)
                if sites is None and _is_grad_housekeeping(stmt):
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
        fix = self._wrap_in_no_grad(statements)
        for _, sites in run:
            for site in sites:
                self.report(site.statement, self._message(site), fix=fix)

    def _message(self, site: Site) -> str:
        code = " ".join(cst.Module([]).code_for_node(site.statement).split())
        if len(code) > 40:
            code = code[:37] + "..."
        target = cst.Module([]).code_for_node(site.target)
        text = (
            f"In-place `{code}` on leaf `{target}` that requires grad ({site.reason.description})"
        )
        if not site.fixable:
            text += "; it was used in the graph before: move the update before its first use"
        return text

    # -- one statement ---------------------------------------------------------------------
    def _site(self, small: cst.BaseSmallStatement) -> Site | None:
        target = _inplace_target(small)
        if target is None:
            return None
        base = target.value if isinstance(target, cst.Subscript) else target
        reason = self.analysis.leaf_reason(base, small)
        if reason is None or self.analysis.in_no_grad(small):
            return None
        site = Site(small, base, reason)
        site.fixable = not self._used_in_graph_before(base, small)
        return site

    def _used_in_graph_before(self, leaf: cst.BaseExpression, at: cst.CSTNode) -> bool:
        """A graph use of ``leaf`` precedes ``at`` in its scope with no backward between."""
        scope = self.analysis.scope_of(at)
        start = self.analysis.index(scope.node)
        binding = self.analysis.reaching_binding(leaf, at) if isinstance(leaf, cst.Name) else None
        if binding is not None:
            start = binding.end
        end = self.analysis.index(self.analysis.enclosing_statement(at) or at)
        finder = _ReadsAndBackwards(leaf, self.analysis)
        scope.node.visit(finder)
        uses = [u for u in finder.uses if start < self.analysis.index(u) < end]
        if not uses:
            return False
        last_use = max(self.analysis.index(u) for u in uses)
        return not any(last_use < self.analysis.index(b) < end for b in finder.backwards)

    # -- the fix -----------------------------------------------------------------------------
    def _wrap_in_no_grad(self, statements: list[cst.BaseStatement]) -> Fix:
        first = statements[0]
        assert isinstance(first, (cst.SimpleStatementLine, cst.BaseCompoundStatement))
        inner = [first.with_changes(leading_lines=()), *statements[1:]]
        block = cst.With(
            items=[cst.WithItem(cst.Call(self.analysis.torch_attr("no_grad")))],
            body=cst.IndentedBlock(body=inner),
            leading_lines=first.leading_lines,
        )
        edits = [Edit(first, block)]
        edits += [Edit(stmt, cst.RemovalSentinel.REMOVE) for stmt in statements[1:]]
        imports = () if self.analysis.torch_alias() else ("torch",)
        return self.fix(edits, "Wrap in `torch.no_grad()`", imports=imports)


def _inplace_target(small: cst.BaseSmallStatement) -> cst.BaseExpression | None:
    """The tensor a statement modifies in place (``w.normal_()``, ``w -= g``, ``w[:] = 0``)."""
    if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
        call: cst.BaseExpression = small.value
        modified = None
        # ``w.normal_().mul_(0.1)``: the innermost receiver is modified.
        while isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute):
            if not _is_inplace_method(call.func.attr.value):
                break
            call = modified = call.func.value
        return modified
    if isinstance(small, cst.AugAssign):
        return small.target
    if isinstance(small, cst.Assign) and isinstance(small.targets[0].target, cst.Subscript):
        return small.targets[0].target
    return None


def _is_inplace_method(name: str) -> bool:
    return name.endswith("_") and not name.startswith("_") and name not in NOT_INPLACE


def _is_grad_housekeeping(stmt: cst.BaseStatement) -> bool:
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


class _ReadsAndBackwards(cst.CSTVisitor):
    """Graph uses of one leaf expression, and backward calls, inside a scope."""

    def __init__(self, leaf: cst.BaseExpression, analysis: object) -> None:
        self.key = cst.Module([]).code_for_node(leaf)
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
        parent = analysis.parent(node)  # type: ignore[attr-defined]
        if isinstance(parent, cst.Attribute) and parent.value is node:
            attribute = parent.attr.value
            return attribute not in NON_GRAPH_ATTRIBUTES and not _is_inplace_method(attribute)
        if isinstance(parent, (cst.AssignTarget, cst.AugAssign)):
            return False
        if analysis.in_no_grad(node):  # type: ignore[attr-defined]
            return False
        for ancestor in analysis.ancestors(node):  # type: ignore[attr-defined]
            if isinstance(ancestor, cst.Call):
                callee = ancestor.func
                name = analysis.call_name(ancestor) or ""  # type: ignore[attr-defined]
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
