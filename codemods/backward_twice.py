"""GF401 backward-twice."""

from __future__ import annotations

import ast
from collections.abc import Iterator

import libcst as cst

from gradfix.edits import Editor, cst_argument, with_argument
from gradfix.rule import Edit, FixAvailability, FixPlan, FixSafety, Invalid, Rule, Valid
from gradfix.semantic import (
    SAVES_DIVISOR,
    SAVES_INPUTS,
    SAVES_OTHER_OPERANDS,
    SAVES_OUTPUT,
    TENSOR_OPS,
    argument,
    argument_value,
    argument_values,
    call_arguments,
    is_false,
    is_unpacked,
)
from gradfix.semantic.syntax import is_backward_call, is_concatenated_string, source_children

#: Backward entry points -> (position of ``retain_graph``, position of ``create_graph``).
GRAD_FUNCTIONS = {"torch.autograd.grad": (3, 4), "torch.autograd.backward": (2, 3)}
BACKWARD_METHOD_POSITIONS = (1, 2)
#: ``torch.nn.functional`` ops outside analysis' ``SAVES_*`` tables that save their inputs.
SAVING_FUNCTIONAL = frozenset(
    "linear bilinear conv1d conv2d conv3d cross_entropy nll_loss binary_cross_entropy "
    "binary_cross_entropy_with_logits kl_div".split()
)
#: Ops that save a tensor whenever they are recorded (some operand requires grad).
SAVING_OPS = SAVES_INPUTS | SAVES_OUTPUT | SAVES_OTHER_OPERANDS | SAVES_DIVISOR
#: Methods whose result is outside the graph.
GRAD_CUTTING_OPS = frozenset("detach detach_ item tolist numpy argmax argmin".split())
_MAX_DEPTH = 12

#: Expressions of a graph that save tensors: id -> (expression, node it is evaluated at).
_SavingNodes = dict[int, tuple[ast.expr, ast.AST]]
#: Loops: a backward call in one reruns with each iteration.
_LOOPS = (ast.For, ast.AsyncFor, ast.While)
#: Nodes whose code runs apart from the statement holding them.
_DEFERRED = (
    ast.FunctionDef,
    ast.AsyncFunctionDef,
    ast.ClassDef,
    ast.Lambda,
    ast.ListComp,
    ast.GeneratorExp,
)


class BackwardTwice(Rule):
    """
    ## What it does
    Finds two `backward()` / `torch.autograd.grad()` calls through the same autograd graph
    where the first one does not pass `retain_graph=True`, and adds `retain_graph=True` to
    the first call.

    ## Why is this bad?
    `backward()` frees the tensors the graph saved for backward (the inputs of `x * w`,
    the output of `exp`...) as it goes. A second backward pass through any of those ops
    raises "Trying to backward through the graph a second time (or directly access saved
    tensors after they have already been freed)". It happens with the same root twice, with
    two losses that share an intermediate result, and with `loss.backward()` inside a loop
    when `loss` is computed once before the loop.

    ## Example
    ```python
    h = torch.tanh(x @ w)
    loss1 = h.sum()
    loss2 = (h ** 2).sum()
    loss1.backward()
    loss2.backward()  # RuntimeError: Trying to backward through the graph a second time
    ```

    ## Use instead
    ```python
    loss1.backward(retain_graph=True)
    loss2.backward()
    ```
    Gradients of the two calls accumulate in `.grad`, as the original code asked for.

    ## Fix safety
    Safe: `retain_graph=True` changes no forward result and only keeps the saved tensors
    alive until the last call. No fix when parameters may be updated between the calls
    (an optimizer `step()`, an in-place op): the retained graph would then fail its version
    check, and the code needs a new forward pass instead. No fix for a loop that calls
    `backward()` on a loss computed once before the loop: that graph is stale after the
    first update, and the forward pass belongs inside the loop. Only graphs with an op
    shown to save tensors are reported (`a + b` and `x.sum()` save nothing and can be
    back-propagated twice).
    """

    code = "GF401"
    name = "backward-twice"
    message = "Second backward pass through a graph freed by the first; pass `retain_graph=True`"
    fix_safety = FixSafety.SAFE
    fix_availability = FixAvailability.SOMETIMES

    VALID = [
        Valid(
            """
            import torch
            a = torch.tensor([3.0], requires_grad=True)
            b = a * a
            b.backward(retain_graph=True)
            b.backward()
            """
        ),
        Valid(
            """
            import torch
            w = torch.randn(3, requires_grad=True)
            opt = torch.optim.SGD([w], lr=0.1)
            for step in range(3):
                loss = (w * w).sum()
                opt.zero_grad()
                loss.backward()
                opt.step()
            """
        ),
        Valid(
            """
            import torch
            a = torch.tensor([3.0], requires_grad=True)
            b = a * a * a
            db = torch.autograd.grad(b, a, create_graph=True)[0]
            d2b = torch.autograd.grad(db, a)[0]
            """
        ),
        Valid(
            """
            import torch
            w = torch.randn(3, requires_grad=True)
            loss1 = (w * 2).sum()
            loss2 = w.exp().sum()
            loss1.backward()
            loss2.backward()
            """
        ),
        Valid(
            """
            import torch
            w = torch.randn(3, requires_grad=True)
            h = w + 1
            (h.sum()).backward()
            h.mean().backward()
            """
        ),
        Valid(
            """
            import torch
            w = torch.randn(3, requires_grad=True)
            loss = (w * w).sum()
            loss.backward()
            loss = (w * w).sum()
            loss.backward()
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            a = torch.tensor([3.0], requires_grad=True)
            b = a * a
            b.backward()
            b.backward()
            """,
            """
            import torch
            a = torch.tensor([3.0], requires_grad=True)
            b = a * a
            b.backward(retain_graph=True)
            b.backward()
            """,
        ),
        Invalid(
            """
            import torch as th

            def two_losses(x, w):
                h = th.tanh(x @ w)
                loss1 = h.sum()
                loss2 = (h ** 2).mean()
                th.autograd.grad(loss1, w)
                loss2.backward(inputs=[w])
            """,
            """
            import torch as th

            def two_losses(x, w):
                h = th.tanh(x @ w)
                loss1 = h.sum()
                loss2 = (h ** 2).mean()
                th.autograd.grad(loss1, w, retain_graph=True)
                loss2.backward(inputs=[w])
            """,
        ),
        Invalid(
            """
            import torch
            w = torch.randn(3, requires_grad=True)
            loss = (w ** 2).sum()
            for epoch in range(3):
                loss.backward()
            """,
            report_only=True,
        ),
    ]

    def visit_Call(self, node: ast.Call) -> None:
        root = self._first_pass_root(node)
        if root is None or self.analysis.in_no_grad(node) or not self.analysis.imports_torch():
            return
        saving = self._saving_nodes(root, node)
        if not any(self.analysis.is_tensor(expr, at) for expr, at in saving.values()):
            return  # no op of the graph is shown to be a torch op: another library's backward
        loop = self._repeating_loop(node, root)
        if loop is not None:
            self.report(node)  # the forward pass belongs inside the loop: no fix
            return
        for later in self._later_backward_calls(node):
            later_root = self._root(later)
            if later_root is not None and saving.keys() & self._saving_nodes(later_root, later):
                self.report(node, fix=self._fix(node, later))
                return

    def visit_Assign(self, node: ast.Assign) -> None:
        """A run saw the value this statement binds carry a freed graph into the next
        iteration (``out, h = rnn(x, h)``): detach the state it passes back in. Only on a
        run's evidence (``gradfix trace``), which then proves the fix by running again."""
        if not self.proven_at_run(node.lineno, "backward-twice"):
            return
        state = [name for name in _bound(node.targets) if name in _read(node.value)]
        if state and self._in_loop(node):
            self.report(node, fix=self._detach_fix(node, state))

    def _in_loop(self, node: ast.AST) -> bool:
        scope = self.analysis.scope_of(node).node
        for ancestor in self.analysis.ancestors(node):
            if ancestor is scope:
                return False
            if isinstance(ancestor, _LOOPS):
                return True
        return False

    def _detach_fix(self, node: ast.Assign, state: list[str]) -> FixPlan:
        detach = f"{', '.join(state)} = {', '.join(f'{name}.detach()' for name in state)}\n"

        def build(editor: Editor) -> list[Edit] | None:
            line = editor.statement(node)
            if not isinstance(line, cst.SimpleStatementLine) or len(line.body) != 1:
                return None
            after = cst.parse_statement(detach)
            return [Edit(line, cst.FlattenSentinel([line, after]))]

        names = ", ".join(f"`{name}`" for name in state)
        # offered only on a run's evidence, and written only once a run proved it
        return self.plan(build, f"Detach {names} where the step ends")

    # -- which calls run a backward pass -------------------------------------------------
    def _positions(self, call: ast.Call) -> tuple[int, int] | None:
        name = self.analysis.call_name(call)
        if name in GRAD_FUNCTIONS:
            return GRAD_FUNCTIONS[name]
        if name is None and is_backward_call(call):
            return BACKWARD_METHOD_POSITIONS
        return None

    def _root(self, call: ast.Call) -> ast.expr | None:
        """The tensor a backward call differentiates (``loss`` of ``loss.backward()``)."""
        if self._positions(call) is None:
            return None
        if type(call.func) is ast.Attribute and self.analysis.call_name(call) is None:
            return call.func.value
        return argument(call, "outputs", 0) or argument(call, "tensors", 0)

    def _first_pass_root(self, call: ast.Call) -> ast.expr | None:
        """The root of ``call`` when the call frees the graph it runs through."""
        positions = self._positions(call)
        if positions is None or any(is_unpacked(arg) for arg in call_arguments(call)):
            return None
        retain = argument(call, "retain_graph", positions[0])
        if retain is not None and not is_false(retain):
            return None
        create = argument(call, "create_graph", positions[1])
        if create is not None and not (is_false(create) or retain is not None):
            return None  # create_graph=True retains the graph too
        return self._root(call)

    # -- what the graph saves ------------------------------------------------------------
    def _saving_nodes(self, expr: ast.expr, at: ast.AST) -> _SavingNodes:
        """The expressions of ``expr``'s graph (following names to their reaching bindings)
        that record an op saving tensors for backward, by id.

        The root of a backward call requires grad (or the first call fails anyway), so an
        op whose only non-constant operand is on the root's path is recorded too.
        """
        found: _SavingNodes = {}
        self._collect_saving(expr, at, True, found, set(), 0)
        return found

    def _collect_saving(
        self,
        expr: ast.expr,
        at: ast.AST,
        recorded: bool,
        found: _SavingNodes,
        seen: set[int],
        depth: int,
    ) -> None:
        if depth > _MAX_DEPTH:
            return
        if type(expr) is ast.Name:
            binding = self.analysis.reaching_binding(expr, at)
            if binding is None or binding.kind != "assign" or binding.value is None:
                return
            if id(binding.node) in seen or self.analysis.in_no_grad(binding.node):
                return
            seen.add(id(binding.node))
            self._collect_saving(binding.value, binding.node, recorded, found, seen, depth + 1)
            return
        op = self._tensor_op(expr, at)
        if op is None:
            if self._opaque_call_saves(expr, at, recorded):
                found[id(expr)] = (expr, at)
            keeps_path = type(expr) is ast.Subscript or type(expr) is ast.Attribute
            for operand in _operands(expr):
                self._collect_saving(operand, at, recorded and keeps_path, found, seen, depth + 1)
            return
        name, operands = op
        if name in GRAD_CUTTING_OPS:
            return
        recorded = recorded or self.analysis.requires_grad(expr, at)
        if recorded and name in SAVING_OPS:
            found[id(expr)] = (expr, at)
        variables = [o for o in operands if not _is_constant(o, self.context.source)]
        for operand in operands:
            on_path = recorded and len(variables) == 1 and operand is variables[0]
            self._collect_saving(operand, at, on_path, found, seen, depth + 1)

    def _tensor_op(self, expr: ast.expr, at: ast.AST) -> tuple[str, list[ast.expr]] | None:
        """The analysis' op of ``expr``; also a known tensor method on an unproven receiver."""
        op = self.analysis.tensor_op(expr, at)
        if op is not None or type(expr) is not ast.Call:
            return op
        func = expr.func
        if type(func) is ast.Attribute and self.analysis.qualified_name(func) is None:
            method = func.attr
            if method in TENSOR_OPS or method in GRAD_CUTTING_OPS:
                return method, [func.value, *_argument_values(expr)]
        return None

    def _opaque_call_saves(self, expr: ast.expr, at: ast.AST, recorded: bool) -> bool:
        """``expr`` calls an ``nn`` layer or a ``torch.nn.functional`` op that saves tensors."""
        if type(expr) is not ast.Call:
            return False
        if self.analysis.is_nn_layer(expr.func, at):
            return True
        name = self.analysis.call_name(expr) or ""
        short = name.rpartition(".")[2]
        if not name.startswith("torch.nn.functional.") or "." in name[20:]:
            return False
        saves = short in SAVING_FUNCTIONAL or short.endswith("_loss")
        return saves and (recorded or self.analysis.requires_grad(expr, at))

    # -- where the second pass comes from ------------------------------------------------
    def _repeating_loop(self, call: ast.Call, root: ast.expr) -> ast.AST | None:
        """The innermost loop around ``call`` that reruns it on a graph built before it."""
        if type(root) is not ast.Name:
            return None
        binding = self.analysis.reaching_binding(root, call)
        if binding is None:
            return None
        scope = self.analysis.scope_of(call)
        for ancestor in self.analysis.ancestors(call):
            if ancestor is scope.node:
                return None
            if isinstance(ancestor, _LOOPS):
                body = ancestor.body
                built_inside = self.analysis.block_contains(body, binding.node) or any(
                    self.analysis.block_contains(body, b.node) for b in self.analysis.bindings(root)
                )
                return None if built_inside else ancestor
        return None

    def _rest_of_block(self, call: ast.Call) -> _CallCollector:
        """Calls and augmented assignments of the statements of ``call``'s block from
        ``call``'s statement on (they run after it whenever it runs), same scope only."""
        collector = _CallCollector()
        statement = self.analysis.enclosing_statement(call)
        while statement is not None and self.analysis.in_one_line_suite(statement):
            # ``if c: loss.backward()``: LibCST's statement is the ``if`` (in its block)
            owner = self.analysis.parent(statement)
            statement = self.analysis.enclosing_statement(owner) if owner else None
        block = None if statement is None else self.analysis.statement_block(statement)
        if block is None:
            return collector
        start = next(i for i, sibling in enumerate(block) if sibling is statement)
        for sibling in block[start:]:
            collector.visit(sibling)
        return collector

    def _later_backward_calls(self, call: ast.Call) -> Iterator[ast.Call]:
        for later in self._rest_of_block(call).calls:
            if self.analysis.index(later) > self.analysis.index(call) and self._positions(later):
                yield later

    def _fix(self, call: ast.Call, later: ast.Call) -> FixPlan | None:
        if self._updates_between(call, later):
            return None
        positions = self._positions(call)
        assert positions is not None

        def retain_graph(editor: Editor, node: cst.CSTNode) -> cst.Call:
            assert isinstance(node, cst.Call)
            retain = cst_argument(node, "retain_graph", positions[0])
            true = cst.Name("True")
            if retain is None:
                return with_argument(node, "retain_graph", true)
            args = [a.with_changes(value=true) if a is retain else a for a in node.args]
            return node.with_changes(args=args)

        return self.plan_replace(call, retain_graph, "Pass `retain_graph=True`")

    def _updates_between(self, call: ast.Call, later: ast.Call) -> bool:
        """An optimizer step or an in-place op runs between the two calls."""
        start, end = self.analysis.index(call), self.analysis.index(later)
        rest = self._rest_of_block(call)
        for other in rest.calls:
            func = other.func
            if start < self.analysis.index(other) < end and type(func) is ast.Attribute:
                if func.attr == "step" or func.attr.endswith("_"):
                    return True
        return any(start < self.analysis.index(a) < end for a in rest.augassigns)


def _bound(targets: list[ast.expr]) -> list[str]:
    """The plain names an assignment binds (``out, (h, c) = ...`` -> out, h, c)."""
    names: list[str] = []
    for target in targets:
        if type(target) is ast.Name:
            names.append(target.id)
        elif isinstance(target, (ast.Tuple, ast.List)):
            names += _bound(target.elts)
    return names


def _read(value: ast.expr) -> set[str]:
    return {n.id for n in ast.walk(value) if type(n) is ast.Name and type(n.ctx) is ast.Load}


class _CallCollector(ast.NodeVisitor):
    """Calls and augmented assignments in source order, outside nested functions, classes,
    lambdas, list comprehensions and generator expressions."""

    def __init__(self) -> None:
        self.calls: list[ast.Call] = []
        self.augassigns: list[ast.AugAssign] = []

    def generic_visit(self, node: ast.AST) -> None:
        if type(node) is ast.Call:
            self.calls.append(node)
        elif type(node) is ast.AugAssign:
            self.augassigns.append(node)
        elif isinstance(node, _DEFERRED):
            return
        for child in source_children(node):
            self.visit(child)


def _argument_values(call: ast.Call) -> list[ast.expr]:
    """The values of ``call``'s arguments in source order (keywords may precede ``*args``)."""
    if call.keywords and call.args:
        return [argument_value(a) for a in source_children(call)[1:]]  # type: ignore[arg-type]
    return argument_values(call)


def _operands(expr: ast.expr) -> list[ast.expr]:
    """The sub-expressions whose values flow into ``expr`` (not names of methods)."""
    if type(expr) is ast.Attribute or type(expr) is ast.Subscript:
        return [expr.value]
    if type(expr) is ast.Call:
        func = [expr.func.value] if type(expr.func) is ast.Attribute else []
        return func + _argument_values(expr)
    if type(expr) is ast.BinOp:
        return [expr.left, expr.right]
    if type(expr) is ast.UnaryOp:
        return [expr.operand]
    if type(expr) is ast.Tuple or type(expr) is ast.List:
        return [argument_value(element) for element in expr.elts]
    return []


def _is_constant(expr: ast.expr, source: str) -> bool:
    """A literal number, string, ``True``, ``False`` or ``None`` (signs allowed)."""
    if type(expr) is ast.UnaryOp:
        return _is_constant(expr.operand, source)
    if type(expr) is not ast.Constant or type(expr.value) in (complex, type(...)):
        return False
    return not is_concatenated_string(expr, source)
