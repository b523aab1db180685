"""GF405 missing-zero-grad."""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator

import libcst as cst

from gradfix.edits import Editor
from gradfix.rule import Edit, FixAvailability, FixPlan, FixSafety, Invalid, Rule, Valid
from gradfix.semantic import Semantic

_LOOPS = (ast.For, ast.AsyncFor, ast.While)
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.Module)
#: between a loop and its ``step()``: a branch means the step is not taken every iteration
_CONDITIONAL = (ast.If, ast.IfExp, ast.Match, ast.ExceptHandler)
_SCHEDULERS = "torch.optim.lr_scheduler."


class MissingZeroGrad(Rule):
    """
    ## What it does
    Finds a training loop that calls `loss.backward()` and `optimizer.step()` in every
    iteration but never clears the gradients inside the loop: no `optimizer.zero_grad()`,
    `model.zero_grad()`, `p.grad = None` or `p.grad.zero_()`.

    ## Why is this bad?
    `backward()` adds into `.grad`; it never overwrites it. Without a reset, the gradient
    used by step `k` is the sum of the gradients of steps `1..k`: the effective learning
    rate grows with every step, momentum and Adam's moments see the running sum, and the
    training diverges or stalls with no error.

    ## Example
    ```python
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
    ```

    ## Use instead
    ```python
    for x, y in loader:
        optimizer.zero_grad()
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
    ```

    Deliberate gradient accumulation is left alone: a loop that clears the gradients
    anywhere in its body (`if (i + 1) % k == 0: optimizer.step(); optimizer.zero_grad()`),
    through a function of the file that does, or that steps only under a condition, is
    not reported; nor is an optimizer built inside the loop (a fresh one each iteration,
    usually over fresh leaves: latent optimisation, guidance). The optimizer is recognised
    by its construction (`torch.optim.*`, also through a function parameter every call
    site passes one) or by its name (`opt`, `optimizer`...); an LR scheduler's `step()`
    is not an optimizer step.

    ## Fix safety
    Unsafe: `optimizer.zero_grad()` is inserted right before the statement of the loop's
    backward call, so each step uses the gradient of its own loss; every step after the
    first changes, which is the point. Offered only for a loop with one backward call
    and one optimizer step per iteration (named by a plain name or attribute): with
    several, where the reset goes and whether some accumulation was meant are the
    author's decisions, and the finding is only reported. The verifier proves the fix
    by running both versions: each backward call gives the same gradient in both until
    before adds one to the stale sum it never cleared, and from there on the fix's
    gradients must equal finite differences of its own forward.
    """

    code = "GF405"
    calls = frozenset({"backward"})
    name = "missing-zero-grad"
    synopsis = (
        "Finds a training loop that calls `backward()` and `optimizer.step()` but never "
        "clears the gradients, which add up, and inserts `optimizer.zero_grad()`."
    )
    message = (
        "Gradients accumulate across iterations: the loop calls backward() and "
        "optimizer.step() but never zeroes the gradients"
    )
    fix_safety = FixSafety.UNSAFE
    fix_availability = FixAvailability.SOMETIMES
    fix_changes_training = True

    VALID = [
        Valid(
            """
            import torch
            model = torch.nn.Linear(3, 1)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for step, x in enumerate(torch.randn(8, 4, 3)):
                loss = model(x).pow(2).mean() / 4
                loss.backward()
                if (step + 1) % 4 == 0:
                    optimizer.step()
                    optimizer.zero_grad()
            """
        ),
        Valid(
            """
            import torch
            model = torch.nn.Linear(3, 1)
            opt = torch.optim.Adam(model.parameters())
            scheduler = torch.optim.lr_scheduler.StepLR(opt, 10)
            for x in torch.randn(8, 4, 3):
                model.zero_grad(set_to_none=True)
                model(x).sum().backward()
                opt.step()
            for x in torch.randn(8, 4, 3):
                for p in model.parameters():
                    p.grad = None
                model(x).sum().backward()
                opt.step()
            for x in torch.randn(8, 4, 3):
                model(x).sum().backward()
                scheduler.step()
            """
        ),
        Valid(
            """
            import torch
            model = torch.nn.Linear(3, 1)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            accumulated = 0

            def clear(model):
                for p in model.parameters():
                    if p.grad is not None:
                        p.grad.detach_().zero_()

            for x in torch.randn(8, 4, 3):
                model(x).sum().backward()
                accumulated += 1
                if accumulated == 4:
                    optimizer.step()
                    accumulated = 0
            for x in torch.randn(8, 4, 3):
                model(x).sum().backward()
                optimizer.step()
                clear(model)
            for z in torch.randn(3, 4, 3):
                x = z.detach().clone().requires_grad_(True)
                guide = torch.optim.SGD([x], lr=0.1)
                model(x).sum().backward()
                guide.step()
            for batch in torch.randn(2, 4, 4, 3):
                optimizer.zero_grad()
                for x in batch:
                    model(x).sum().backward()
                optimizer.step()
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            model = torch.nn.Linear(3, 1)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            optimizer.zero_grad()
            for x in torch.randn(8, 4, 3):
                loss = model(x).pow(2).mean()
                loss.backward()
                optimizer.step()
            """,
            expected_fix="""
            import torch
            model = torch.nn.Linear(3, 1)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            optimizer.zero_grad()
            for x in torch.randn(8, 4, 3):
                loss = model(x).pow(2).mean()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            """,
        ),
        Invalid(
            """
            import torch

            def train(model, loader, optim):
                for x, y in loader:
                    loss = torch.nn.functional.mse_loss(model(x), y)
                    loss.backward()
                    optim.step()

            net = torch.nn.Linear(3, 1)
            train(net, [(torch.randn(4, 3), torch.randn(4, 1))], torch.optim.Adam(net.parameters()))
            """,
            expected_fix="""
            import torch

            def train(model, loader, optim):
                for x, y in loader:
                    loss = torch.nn.functional.mse_loss(model(x), y)
                    optim.zero_grad()
                    loss.backward()
                    optim.step()

            net = torch.nn.Linear(3, 1)
            train(net, [(torch.randn(4, 3), torch.randn(4, 1))], torch.optim.Adam(net.parameters()))
            """,
        ),
        Invalid(
            """
            import torch
            model = torch.nn.Linear(3, 1)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for x in torch.randn(8, 4, 3):
                model(x).sum().backward()
                model(x).pow(2).sum().backward()
                optimizer.step()
            """,
            report_only=True,
        ),
    ]

    def visit_Call(self, node: ast.Call) -> None:
        if not self._is_backward(node):
            return
        loop = _innermost_loop(self.analysis, node)
        if loop is None or _zeroes(loop) or self._calls_zeroing_function(loop):
            return
        calls = list(_calls_in_scope(loop))
        if node is not self._first_backward(loop, calls):
            return  # one missing reset, one finding: at the loop's first backward call
        steps = [call for call in calls if self._steps_every_iteration(call, loop)]
        if steps:
            self.report(node, fix=self._clear_before(node, loop, calls, steps))

    def _first_backward(self, loop: ast.AST, calls: list[ast.Call]) -> ast.Call | None:
        """The first backward call (in source order) whose innermost loop is ``loop``."""
        own = [
            call
            for call in calls
            if self._is_backward(call) and _innermost_loop(self.analysis, call) is loop
        ]
        return min(own, key=lambda call: (call.lineno, call.col_offset), default=None)

    def _clear_before(
        self, backward: ast.Call, loop: ast.AST, calls: list[ast.Call], steps: list[ast.Call]
    ) -> FixPlan | None:
        """``optimizer.zero_grad()`` right before the statement of the loop's one backward
        call, for its one optimizer step (several backward calls or steps per iteration:
        where the reset goes is the author's decision)."""
        backwards = [call for call in calls if self._is_backward(call)]
        if len(backwards) != 1 or len(steps) != 1:
            return None
        step = steps[0]
        assert type(step.func) is ast.Attribute
        receiver = step.func.value
        if not self._is_optimizer(receiver, step) and len(step.args) == 1:
            receiver = step.args[0]  # scaler.step(optimizer)
        if not _is_dotted_name(receiver):
            return None
        statement = next(
            (a for a in self.analysis.ancestors(backward) if isinstance(a, ast.stmt)), None
        )
        if statement is None or not self.analysis.contains(loop, statement):
            return None
        reset = f"{ast.unparse(receiver)}.zero_grad()\n"

        def build(editor: Editor) -> list[Edit]:
            line = editor.statement(statement)
            cleared = cst.parse_statement(reset).with_changes(leading_lines=line.leading_lines)
            return [Edit(line, cst.FlattenSentinel([cleared, line.with_changes(leading_lines=())]))]

        return self.plan(build, f"Clear the gradients with `{reset.strip()}` before `backward()`")

    @functools.cached_property
    def _zeroing_functions(self) -> frozenset[str]:
        """The functions of this file that clear gradients (asked only where a backward
        call sits in a loop: most files have none)."""
        return frozenset(
            func.name
            for kind in (ast.FunctionDef, ast.AsyncFunctionDef)
            for func in self.analysis.by_type.get(kind, ())
            if _zeroes(func)  # type: ignore[arg-type]
        )

    def _is_backward(self, call: ast.Call) -> bool:
        if type(call.func) is ast.Attribute and call.func.attr == "backward":
            return True
        return self.analysis.call_name(call) == "torch.autograd.backward"

    def _calls_zeroing_function(self, loop: ast.AST) -> bool:
        """The loop names a function of this file that clears gradients (a helper, an
        LBFGS ``closure``)."""
        return any(
            (type(n) is ast.Name and n.id in self._zeroing_functions)
            or (type(n) is ast.Attribute and n.attr in self._zeroing_functions)
            for n in ast.walk(loop)
        )

    def _steps_every_iteration(self, call: ast.Call, loop: ast.AST) -> bool:
        """``optimizer.step()`` (or ``scaler.step(optimizer)``), unconditional in ``loop``."""
        func = call.func
        if type(func) is not ast.Attribute or func.attr != "step":
            return False
        if not self._is_optimizer(func.value, call) and not any(
            self._is_optimizer(arg, call) for arg in call.args[:1]
        ):
            return False
        if _innermost_loop(self.analysis, call) is not loop or self._made_in(func.value, loop):
            return False
        return not any(
            isinstance(a, _CONDITIONAL) for a in _ancestors_until(self.analysis, call, loop)
        )

    def _made_in(self, optimizer: ast.expr, loop: ast.AST) -> bool:
        """The optimizer is built inside the loop: a fresh one each iteration, usually over
        fresh leaves (``x = z.detach().requires_grad_(); opt = SGD([x])``), so nothing
        carries over."""
        if type(optimizer) is not ast.Name:
            return False
        binding = self.analysis.reaching_binding(optimizer)
        return binding is not None and self.analysis.contains(loop, binding.node)

    def _is_optimizer(self, expr: ast.AST, at: ast.AST, depth: int = 0) -> bool:
        if depth > 8:
            return False
        if type(expr) is ast.Call:
            name = self.analysis.call_name(expr) or ""
            return name.startswith("torch.optim.") and not name.startswith(_SCHEDULERS)
        if type(expr) is ast.Name:
            binding = self.analysis.reaching_binding(expr, at)
            if binding is not None and binding.kind == "assign" and binding.value is not None:
                return self._is_optimizer(binding.value, binding.node, depth + 1)
            if binding is not None and binding.kind == "param" and type(binding.node) is ast.arg:
                passed = self.analysis.passed_arguments(binding.node)
                if passed and all(self._is_optimizer(a, s, depth + 1) for a, s in passed):
                    return True
            return _optimizer_name(expr.id)
        return type(expr) is ast.Attribute and _optimizer_name(expr.attr)


def _is_dotted_name(expr: ast.expr) -> bool:
    """``optimizer``, ``self.optimizer``: a receiver the fix can name again."""
    while type(expr) is ast.Attribute:
        expr = expr.value
    return type(expr) is ast.Name


def _optimizer_name(name: str) -> bool:
    """``optimizer``, ``optim``, ``opt``, ``g_opt``, ``opt_d``, ``optimizer_G``..."""
    lowered = name.lower()
    return "optim" in lowered or "opt" in lowered.split("_")


def _innermost_loop(analysis: Semantic, node: ast.AST) -> ast.AST | None:
    """The nearest loop around ``node`` in its own function (None: not in a loop)."""
    for ancestor in analysis.ancestors(node):
        if isinstance(ancestor, _LOOPS):
            return ancestor
        if isinstance(ancestor, _SCOPES):
            return None
    return None


def _ancestors_until(analysis: Semantic, node: ast.AST, stop: ast.AST) -> Iterator[ast.AST]:
    for ancestor in analysis.ancestors(node):
        if ancestor is stop:
            return
        yield ancestor


def _calls_in_scope(root: ast.AST) -> Iterator[ast.Call]:
    """The calls under ``root``, not those inside functions or classes defined there."""
    stack = list(ast.iter_child_nodes(root))
    while stack:
        node = stack.pop()
        if isinstance(node, _SCOPES):
            continue
        if type(node) is ast.Call:
            yield node
        stack.extend(ast.iter_child_nodes(node))


def _zeroes(root: ast.AST) -> bool:
    """``root`` clears gradients somewhere: ``x.zero_grad(...)``, ``p.grad = None`` (any
    assignment to ``.grad``), an in-place call on a ``.grad`` (``p.grad.zero_()``)."""
    for node in ast.walk(root):
        if type(node) is ast.Call and type(node.func) is ast.Attribute:
            in_place = node.func.attr.endswith("_") and _mentions_grad(node.func.value)
            if node.func.attr == "zero_grad" or in_place:
                return True
        targets: list[ast.expr] = []
        if type(node) is ast.Assign:
            targets = node.targets
        elif isinstance(node, ast.AnnAssign | ast.AugAssign):
            targets = [node.target]
        if targets:
            if any(type(t) is ast.Attribute and t.attr == "grad" for t in targets):
                return True
    return False


def _mentions_grad(expr: ast.AST) -> bool:
    """``p.grad``, ``p.grad.data``: the receiver of an in-place call is a gradient."""
    while type(expr) is ast.Attribute:
        if expr.attr == "grad":
            return True
        expr = expr.value
    return False
