"""GF401 backward-twice."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from gradfix.analysis import (
    SAVES_DIVISOR,
    SAVES_INPUTS,
    SAVES_OTHER_OPERANDS,
    SAVES_OUTPUT,
    TENSOR_OPS,
    argument,
    is_false,
)
from gradfix.rule import Fix, FixAvailability, FixSafety, Invalid, Rule, Valid
from gradfix.walk import walk

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
_SavingNodes = dict[int, tuple[cst.BaseExpression, cst.CSTNode]]


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
    prefilter = ("backward", "grad")

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

    def visit_Call(self, node: cst.Call) -> None:
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

    # -- which calls run a backward pass -------------------------------------------------
    def _positions(self, call: cst.Call) -> tuple[int, int] | None:
        func = call.func
        name = self.analysis.call_name(call)
        if name in GRAD_FUNCTIONS:
            return GRAD_FUNCTIONS[name]
        if name is None and isinstance(func, cst.Attribute) and func.attr.value == "backward":
            return BACKWARD_METHOD_POSITIONS
        return None

    def _root(self, call: cst.Call) -> cst.BaseExpression | None:
        """The tensor a backward call differentiates (``loss`` of ``loss.backward()``)."""
        if self._positions(call) is None:
            return None
        if isinstance(call.func, cst.Attribute) and self.analysis.call_name(call) is None:
            return call.func.value
        first = argument(call, "outputs", 0) or argument(call, "tensors", 0)
        return first.value if first is not None else None

    def _first_pass_root(self, call: cst.Call) -> cst.BaseExpression | None:
        """The root of ``call`` when the call frees the graph it runs through."""
        positions = self._positions(call)
        if positions is None or any(arg.star for arg in call.args):
            return None
        retain = argument(call, "retain_graph", positions[0])
        if retain is not None and not is_false(retain.value):
            return None
        create = argument(call, "create_graph", positions[1])
        if create is not None and not (is_false(create.value) or retain is not None):
            return None  # create_graph=True retains the graph too
        return self._root(call)

    # -- what the graph saves ------------------------------------------------------------
    def _saving_nodes(self, expr: cst.BaseExpression, at: cst.CSTNode) -> _SavingNodes:
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
        expr: cst.BaseExpression,
        at: cst.CSTNode,
        recorded: bool,
        found: _SavingNodes,
        seen: set[int],
        depth: int,
    ) -> None:
        if depth > _MAX_DEPTH:
            return
        if isinstance(expr, cst.Name):
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
            keeps_path = isinstance(expr, (cst.Subscript, cst.Attribute))
            for operand in _operands(expr):
                self._collect_saving(operand, at, recorded and keeps_path, found, seen, depth + 1)
            return
        name, operands = op
        if name in GRAD_CUTTING_OPS:
            return
        recorded = recorded or self.analysis.requires_grad(expr, at)
        if recorded and name in SAVING_OPS:
            found[id(expr)] = (expr, at)
        variables = [o for o in operands if not _is_constant(o)]
        for operand in operands:
            on_path = recorded and len(variables) == 1 and operand is variables[0]
            self._collect_saving(operand, at, on_path, found, seen, depth + 1)

    def _tensor_op(
        self, expr: cst.BaseExpression, at: cst.CSTNode
    ) -> tuple[str, list[cst.BaseExpression]] | None:
        """The analysis' op of ``expr``; also a known tensor method on an unproven receiver."""
        op = self.analysis.tensor_op(expr, at)
        if op is not None or not isinstance(expr, cst.Call):
            return op
        func = expr.func
        if isinstance(func, cst.Attribute) and self.analysis.qualified_name(func) is None:
            method = func.attr.value
            if method in TENSOR_OPS or method in GRAD_CUTTING_OPS:
                return method, [func.value, *(a.value for a in expr.args)]
        return None

    def _opaque_call_saves(self, expr: cst.BaseExpression, at: cst.CSTNode, recorded: bool) -> bool:
        """``expr`` calls an ``nn`` layer or a ``torch.nn.functional`` op that saves tensors."""
        if not isinstance(expr, cst.Call):
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
    def _repeating_loop(self, call: cst.Call, root: cst.BaseExpression) -> cst.CSTNode | None:
        """The innermost loop around ``call`` that reruns it on a graph built before it."""
        if not isinstance(root, cst.Name):
            return None
        binding = self.analysis.reaching_binding(root, call)
        if binding is None:
            return None
        scope = self.analysis.scope_of(call)
        for ancestor in self.analysis.ancestors(call):
            if ancestor is scope.node:
                return None
            if isinstance(ancestor, (cst.For, cst.While)):
                body = ancestor.body
                built_inside = self.analysis.contains(body, binding.node) or any(
                    self.analysis.contains(body, b.node) for b in self.analysis.bindings(root)
                )
                return None if built_inside else ancestor
        return None

    def _rest_of_block(self, call: cst.Call) -> _CallCollector:
        """Calls and augmented assignments of the statements of ``call``'s block from
        ``call``'s statement on (they run after it whenever it runs), same scope only."""
        collector = _CallCollector()
        statement = self.analysis.enclosing_statement(call)
        block = self.analysis.parent(statement) if statement is not None else None
        siblings = getattr(block, "body", None)
        if not isinstance(siblings, (list, tuple)) or statement not in siblings:
            return collector
        for sibling in siblings[list(siblings).index(statement) :]:
            walk(sibling, collector)
        return collector

    def _later_backward_calls(self, call: cst.Call) -> Iterator[cst.Call]:
        for later in self._rest_of_block(call).calls:
            if self.analysis.index(later) > self.analysis.index(call) and self._positions(later):
                yield later

    def _fix(self, call: cst.Call, later: cst.Call) -> Fix | None:
        if self._updates_between(call, later):
            return None
        positions = self._positions(call)
        assert positions is not None
        retain = argument(call, "retain_graph", positions[0])
        true = cst.Name("True")
        if retain is not None:
            new_args = [a.with_changes(value=true) if a is retain else a for a in call.args]
        else:
            new_args = _append_keyword(call, "retain_graph", true)
        return self.replace(call, call.with_changes(args=new_args), "Pass `retain_graph=True`")

    def _updates_between(self, call: cst.Call, later: cst.Call) -> bool:
        """An optimizer step or an in-place op runs between the two calls."""
        start, end = self.analysis.index(call), self.analysis.index(later)
        rest = self._rest_of_block(call)
        for other in rest.calls:
            func = other.func
            if start < self.analysis.index(other) < end and isinstance(func, cst.Attribute):
                if func.attr.value == "step" or func.attr.value.endswith("_"):
                    return True
        return any(start < self.analysis.index(a) < end for a in rest.augassigns)


class _CallCollector(cst.CSTVisitor):
    """Calls and augmented assignments, outside nested functions and classes."""

    def __init__(self) -> None:
        self.calls: list[cst.Call] = []
        self.augassigns: list[cst.AugAssign] = []

    def visit_Call(self, node: cst.Call) -> None:
        self.calls.append(node)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self.augassigns.append(node)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return False

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False

    def visit_ListComp(self, node: cst.ListComp) -> bool:
        return False

    def visit_GeneratorExp(self, node: cst.GeneratorExp) -> bool:
        return False


def _operands(expr: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The sub-expressions whose values flow into ``expr`` (not names of methods)."""
    if isinstance(expr, cst.Attribute):
        return [expr.value]
    if isinstance(expr, cst.Call):
        func = [expr.func.value] if isinstance(expr.func, cst.Attribute) else []
        return func + [arg.value for arg in expr.args]
    if isinstance(expr, cst.BinaryOperation):
        return [expr.left, expr.right]
    if isinstance(expr, cst.UnaryOperation):
        return [expr.expression]
    if isinstance(expr, cst.Subscript):
        return [expr.value]
    if isinstance(expr, (cst.Tuple, cst.List)):
        return [element.value for element in expr.elements]
    return []


def _append_keyword(call: cst.Call, keyword: str, value: cst.BaseExpression) -> list[cst.Arg]:
    """``call``'s arguments plus ``keyword=value``, keeping its layout (a trailing comma
    or a multi-line argument list stays as it is)."""
    new_arg = cst.Arg(
        value=value,
        keyword=cst.Name(keyword),
        equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")),
    )
    args = list(call.args)
    if not args:
        return [new_arg]
    last = args[-1]
    if isinstance(last.comma, cst.Comma):
        # A trailing comma: the old last argument takes the separator used between the
        # arguments, and the new one the trailing comma (with the line break before ``)``).
        between = args[-2].comma if len(args) > 1 else cst.MaybeSentinel.DEFAULT
        if not isinstance(between, cst.Comma):
            between = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        args[-1] = last.with_changes(comma=between)
        return [*args, new_arg.with_changes(comma=last.comma)]
    args[-1] = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    return [*args, new_arg]


def _is_constant(expr: cst.BaseExpression) -> bool:
    if isinstance(expr, cst.UnaryOperation):
        return _is_constant(expr.expression)
    if isinstance(expr, cst.Name):
        return expr.value in ("True", "False", "None")
    return isinstance(expr, (cst.Integer, cst.Float, cst.SimpleString))
