"""GF406 inner-grad-without-create-graph."""

from __future__ import annotations

import ast

import libcst as cst

from gradfix.edits import Editor
from gradfix.rule import Edit, FixPlan, FixSafety, Invalid, Rule, Valid
from gradfix.semantic.syntax import argument, call_arguments, is_unpacked

AUTOGRAD_GRAD = "torch.autograd.grad"
#: ops on a gradient whose result has no useful gradient of its own (an adversarial
#: step ``x + eps * g.sign()``): no second-order term is lost
_FLAT = frozenset({"sign", "detach", "item", "tolist", "numpy", "argmax", "argmin"})
#: how far the walk back from a backpropagated value follows names
_DEPTH = 16


class InnerGradWithoutCreateGraph(Rule):
    """
    ## What it does
    Finds an inner gradient step, `grads = torch.autograd.grad(loss, params)` followed by
    new weights `fast = p - lr * g` (or `p + ...`) built from those gradients, when a
    later loss computed with the new weights is backpropagated (`loss_q.backward()`,
    another `torch.autograd.grad`) and the first call does not pass `create_graph=True`.
    This is the inner loop of MAML and of every "learning to learn" or unrolled
    optimisation, and adds `create_graph=True`.

    ## Why is this bad?
    Without `create_graph=True`, the gradients that `torch.autograd.grad` returns are
    constants to autograd. The new weights still depend on `params` through `p`, so the
    outer backward runs without an error, but it drops the second-order term (the
    gradient through `lr * g`): the meta-gradient is silently the first-order
    approximation, not the derivative of the outer loss.

    ## Example
    ```python
    grads = torch.autograd.grad(loss, params)
    fast = [p - lr * g for p, g in zip(params, grads)]
    loss_q = F.mse_loss(net(x_q, fast), y_q)
    loss_q.backward()
    ```

    ## Use instead
    ```python
    grads = torch.autograd.grad(loss, params, create_graph=True)
    fast = [p - lr * g for p, g in zip(params, grads)]
    loss_q = F.mse_loss(net(x_q, fast), y_q)
    loss_q.backward()
    ```

    A call that passes `create_graph` at all (`create_graph=not first_order`,
    `create_graph=False`: a first-order approximation chosen on purpose), gradients used
    only through `.sign()` or `.detach()` (an adversarial step), in-place updates under
    `torch.no_grad()` (plain SGD by hand), and gradients whose new weights are never
    backpropagated are not reported.

    ## Fix safety
    Unsafe. The forward values are the same and the outer gradient becomes the exact
    derivative (the verifier checks it against finite differences), but it differs from
    before, the backward costs more memory and time, and a first-order approximation
    (FOMAML) may have been the author's intent.
    """

    code = "GF406"
    fix_differentiates_gradients = True
    calls = frozenset({"grad"})
    name = "inner-grad-without-create-graph"
    synopsis = (
        "Finds an inner gradient step whose new weights feed a later backpropagated loss "
        "without `create_graph=True`, dropping the second-order term, and adds it."
    )
    message = (
        "Gradient step whose result is backpropagated again, taken without "
        "`create_graph=True`: the outer gradient silently drops the second-order term"
    )
    fix_safety = FixSafety.UNSAFE

    VALID = [
        Valid(
            """
            import torch
            import torch.nn.functional as F

            w = torch.randn(3, requires_grad=True)
            x, y = torch.randn(4, 3), torch.randn(4)
            loss = F.mse_loss(x @ w, y)
            (g,) = torch.autograd.grad(loss, w, create_graph=True)
            fast = w - 0.1 * g
            F.mse_loss(x @ fast, y).backward()

            first_order = True
            loss = F.mse_loss(x @ w, y)
            (g,) = torch.autograd.grad(loss, w, create_graph=not first_order)
            F.mse_loss(x @ (w - 0.1 * g), y).backward()
            """
        ),
        Valid(
            """
            import torch
            import torch.nn as nn
            import torch.nn.functional as F

            model = nn.Linear(3, 2)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for _ in range(2):
                x = torch.randn(4, 3, requires_grad=True)
                y = torch.randint(0, 2, (4,))
                (gx,) = torch.autograd.grad(F.cross_entropy(model(x), y), x)
                x_adv = (x + 0.03 * gx.sign()).clamp(-3, 3).detach()
                opt.zero_grad()
                F.cross_entropy(model(x_adv), y).backward()
                opt.step()

            params = list(model.parameters())
            for _ in range(2):
                loss = F.cross_entropy(model(torch.randn(4, 3)), torch.zeros(4).long())
                grads = torch.autograd.grad(loss, params)
                with torch.no_grad():
                    for p, g in zip(params, grads):
                        p -= 0.1 * g
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            import torch.nn.functional as F

            params = [torch.randn(4, 3, requires_grad=True), torch.zeros(4, requires_grad=True)]

            def net(x, weights):
                return torch.tanh(F.linear(x, weights[0], weights[1]))

            x_s, y_s = torch.randn(5, 3), torch.randn(5, 4)
            x_q, y_q = torch.randn(5, 3), torch.randn(5, 4)
            loss = F.mse_loss(net(x_s, params), y_s)
            grad = torch.autograd.grad(
                loss,
                params,  # inner step
            )
            fast = list(map(lambda p: p[1] - 0.4 * p[0], zip(grad, params)))
            loss_q = F.mse_loss(net(x_q, fast), y_q)
            loss_q.backward()
            """,
            """
            import torch
            import torch.nn.functional as F

            params = [torch.randn(4, 3, requires_grad=True), torch.zeros(4, requires_grad=True)]

            def net(x, weights):
                return torch.tanh(F.linear(x, weights[0], weights[1]))

            x_s, y_s = torch.randn(5, 3), torch.randn(5, 4)
            x_q, y_q = torch.randn(5, 3), torch.randn(5, 4)
            loss = F.mse_loss(net(x_s, params), y_s)
            grad = torch.autograd.grad(
                loss,
                params,  # inner step
                create_graph=True,
            )
            fast = list(map(lambda p: p[1] - 0.4 * p[0], zip(grad, params)))
            loss_q = F.mse_loss(net(x_q, fast), y_q)
            loss_q.backward()
            """,
        ),
        Invalid(
            """
            import torch as th
            from torch import nn

            class Meta(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.w = nn.Parameter(th.randn(3))

                def forward(self, xs, ys, xq, yq, steps=2):
                    fast = self.w
                    for _ in range(steps):
                        inner = ((xs @ fast - ys) ** 2).mean()
                        (g,) = th.autograd.grad(inner, [fast])
                        fast = fast - 0.1 * g
                    return ((xq @ fast - yq) ** 2).mean()

            meta = Meta()
            opt = th.optim.Adam(meta.parameters(), lr=1e-3)
            for _ in range(2):
                opt.zero_grad()
                outer = meta(th.randn(4, 3), th.randn(4), th.randn(4, 3), th.randn(4))
                outer.backward()
                opt.step()
            """,
            """
            import torch as th
            from torch import nn

            class Meta(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.w = nn.Parameter(th.randn(3))

                def forward(self, xs, ys, xq, yq, steps=2):
                    fast = self.w
                    for _ in range(steps):
                        inner = ((xs @ fast - ys) ** 2).mean()
                        (g,) = th.autograd.grad(inner, [fast], create_graph=True)
                        fast = fast - 0.1 * g
                    return ((xq @ fast - yq) ** 2).mean()

            meta = Meta()
            opt = th.optim.Adam(meta.parameters(), lr=1e-3)
            for _ in range(2):
                opt.zero_grad()
                outer = meta(th.randn(4, 3), th.randn(4), th.randn(4, 3), th.randn(4))
                outer.backward()
                opt.step()
            """,
        ),
    ]

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if type(func) is not ast.Attribute or func.attr != "grad":
            return
        if self.analysis.call_name(node) != AUTOGRAD_GRAD or self._passes_create_graph(node):
            return
        statement = self.analysis.parent(node)
        if type(statement) is not ast.Assign or self.analysis.in_no_grad(node):
            return
        steps = self._update_steps(statement)
        if steps and (self._backpropagated(steps) or self._returned(steps)):
            self.report(node, fix=self._add_create_graph(node))

    def _passes_create_graph(self, call: ast.Call) -> bool:
        given = argument(call, "create_graph", 4)
        return given is not None or any(is_unpacked(arg) for arg in call_arguments(call))

    # -- the new weights -------------------------------------------------------------------
    def _update_steps(self, statement: ast.Assign) -> list[ast.Assign | ast.Return]:
        """The assignments after ``statement`` in its scope (outside ``no_grad``) whose
        value adds or subtracts the gradients to something (``p - lr * g``), reading the
        gradients otherwise than through ``.sign()`` / ``.detach()``."""
        names = {t.id for t in ast.walk(statement.targets[0]) if type(t) is ast.Name}
        scope = self.analysis.scope_of(statement)
        position = self.analysis.index(statement)
        steps: list[ast.Assign | ast.Return] = []
        for name in names:
            for use in self.analysis.name_nodes_in(scope.node, name):
                if self.analysis.index(use) <= position or type(use.ctx) is not ast.Load:
                    continue
                binding = self.analysis.reaching_binding(use)
                if binding is None or binding.node is not statement:
                    continue
                step = self._update_step(use)
                if step is not None and step not in steps:
                    steps.append(step)
        return steps

    def _update_step(self, use: ast.Name) -> ast.Assign | ast.Return | None:
        parent = self.analysis.parent(use)
        if type(parent) is ast.Attribute and parent.attr in _FLAT:
            return None
        for ancestor in self.analysis.ancestors(use):
            if isinstance(ancestor, ast.stmt):
                if type(ancestor) not in (ast.Assign, ast.Return) or ancestor.value is None:  # type: ignore[attr-defined]
                    return None
                if self.analysis.in_no_grad(ancestor):
                    return None
                return ancestor if _adds_or_subtracts(ancestor.value) else None  # type: ignore[attr-defined, return-value]
        return None

    def _backpropagated(self, steps: list[ast.Assign | ast.Return]) -> bool:
        """A backward call of the scope, after the steps, whose value reads their names."""
        scope = self.analysis.scope_of(steps[0]).node
        last = max(self.analysis.index(step) for step in steps)
        for root, call in self.analysis.backward_roots(scope):
            if self.analysis.index(call) > last and self._reads(root, steps, 0):
                return True
        return False

    def _returned(self, steps: list[ast.Assign | ast.Return]) -> bool:
        """The function returns a value read from the steps, and its caller
        backpropagates what it returns: a module's ``forward`` (the outer loss of a
        meta-learner), or a function of the file whose call is backpropagated
        (``fast = learner.adapt(x, y)`` ... ``loss_q.backward()``)."""
        function = self.analysis.enclosing_function(steps[0])
        if function is None:
            return False
        returns = self.analysis.descendants(function, ast.Return)
        returned = any(type(step) is ast.Return for step in steps) or any(
            r.value is not None and self._reads(r.value, steps, 0) for r in returns
        )
        if not returned:
            return False
        return function.name == "forward" or any(
            self._backpropagated([site]) for site in self._call_sites(function.name)
        )

    def _call_sites(self, name: str) -> list[ast.Assign]:
        """``x = f(...)`` / ``x = obj.f(...)`` statements calling a function named ``name``."""
        sites = []
        for call in self.analysis.descendants(self.analysis.module, ast.Call):
            func = call.func
            called = func.attr if type(func) is ast.Attribute else getattr(func, "id", None)
            statement = self.analysis.parent(call)
            if called == name and type(statement) is ast.Assign:
                sites.append(statement)
        return sites

    def _reads(self, expr: ast.AST, steps: list[ast.Assign | ast.Return], depth: int) -> bool:
        """``expr`` is computed from a name one of ``steps`` binds."""
        if depth > _DEPTH:
            return False
        for name in (n for n in ast.walk(expr) if type(n) is ast.Name):
            if type(name.ctx) is not ast.Load:
                continue
            binding = self.analysis.reaching_binding(name)
            if binding is None:
                continue
            if binding.node in steps:
                return True
            if binding.kind in ("assign", "augassign") and binding.value is not None:
                if self._reads(binding.value, steps, depth + 1):
                    return True
        return False

    # -- the fix ---------------------------------------------------------------------------
    def _add_create_graph(self, call: ast.Call) -> FixPlan:
        def build(editor: Editor) -> list[Edit]:
            node = editor.node(call)
            assert isinstance(node, cst.Call)
            return [editor.add_argument(node, "create_graph", "True")]

        return self.plan(build, "Pass `create_graph=True`")


def _adds_or_subtracts(value: ast.expr) -> bool:
    return any(
        type(node) is ast.BinOp and type(node.op) in (ast.Add, ast.Sub) for node in ast.walk(value)
    )
