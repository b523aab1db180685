"""GF403 loss-accumulation."""

from __future__ import annotations

import libcst as cst

from gradfix.rule import Edit, Fix, FixSafety, Invalid, Rule, Valid
from gradfix.walk import walk

#: Calls that turn their argument into something printed or logged.
LOG_FUNCTIONS = frozenset({"print", "float", "int", "round", "str", "repr", "len", "format"})
#: Methods of loggers, writers and progress bars that only record a value.
LOG_METHODS = frozenset(
    "info debug warning warn error log add_scalar add_scalars write set_postfix "
    "set_description set_postfix_str item tolist format".split()
)
#: Calls that combine logged values into another logged value (``sum(losses) / n``).
PASS_THROUGH_FUNCTIONS = frozenset({"sum", "min", "max", "abs", "mean", "median", "fmean"})
#: How deep ``avg = total / n`` / ``history.append(avg)`` chains are followed.
MAX_DEPTH = 3


class LossAccumulation(Rule):
    """
    ## What it does
    Finds a loss that requires grad summed into a running total (`total_loss += loss`,
    `total = total + loss`) or appended to a history list (`losses.append(loss)`) inside a
    loop, when the total is only logged, and detaches the accumulated value.

    ## Why is this bad?
    The running total is itself part of the autograd graph: it keeps a reference to every
    iteration's graph (activations included), so none of them is freed and memory grows
    with every batch until the process runs out of memory (PyTorch FAQ, "My model reports
    cuda runtime error(2): out of memory").

    ## Example
    ```python
    running_loss = 0.0
    for x, y in loader:
        optimizer.zero_grad()
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        running_loss += loss
    print(running_loss / len(loader))
    ```

    ## Use instead
    ```python
        running_loss += loss.detach()
    ```
    `loss.item()` works as well but makes the total a Python float, which breaks later
    `running_loss.item()` calls, and synchronizes with the device at every step.

    ## Fix safety
    Safe: `loss.detach()` has the same value, dtype and device, and the total is only
    printed, formatted, compared or logged, so nothing observes the missing gradient.
    Unsafe when the total (or an average of it) is returned from the function: the caller
    could still backpropagate through it. Totals that reach `.backward()`,
    `torch.autograd.grad`, an `nn` call or any other use gradfix does not recognize as
    logging are gradient accumulation and are not reported, nor are losses computed under
    `torch.no_grad()` or already detached with `.item()` / `.detach()`.
    """

    code = "GF403"
    name = "loss-accumulation"
    message = "Accumulating a loss that requires grad keeps every iteration's graph alive"
    fix_safety = FixSafety.SAFE
    fix_safeties = (FixSafety.SAFE, FixSafety.UNSAFE)
    prefilter = ("+=", "append", "+")

    VALID = [
        Valid(
            """
            import torch
            model = torch.nn.Linear(3, 1)
            total = 0
            for x in torch.rand(4, 2, 3):
                total = total + model(x).sum()
            total.backward()  # gradient accumulation: the total is backpropagated
            """
        ),
        Valid(
            """
            import torch
            model = torch.nn.Linear(3, 1)
            running_loss = 0.0
            for x in torch.rand(4, 2, 3):
                loss = model(x).pow(2).mean()
                loss.backward()
                running_loss += loss.item()
            print(running_loss)
            """
        ),
        Valid(
            """
            import torch
            model = torch.nn.Linear(3, 1)
            total = 0.0
            with torch.no_grad():
                for x in torch.rand(4, 2, 3):
                    total += model(x).sum()
            print(total)
            """
        ),
        Valid(
            """
            import torch
            model = torch.nn.Linear(3, 1)
            total = 0
            for x in torch.rand(4, 2, 3):
                total += model(x).sum()
                total.backward(retain_graph=True)
            """
        ),
        Valid(
            """
            import torch
            from torch import nn
            layer = nn.Linear(2, 1)

            def multi_head_loss(x):
                losses = []
                for head in range(2):
                    losses.append(layer(x).sum() * head)
                return sum(losses)  # returned for the caller's backward

            def total_loss(x):
                total = 0
                for scale in (1.0, 2.0):
                    total += layer(x).sum() * scale
                print(total.item())
                return total
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            model = torch.nn.Linear(3, 1)
            running_loss = 0.0
            for x in torch.rand(4, 2, 3):
                loss = model(x).pow(2).mean()
                loss.backward()
                running_loss += loss
            print(f"loss {running_loss / 4:.3f}")
            """,
            """
            import torch
            model = torch.nn.Linear(3, 1)
            running_loss = 0.0
            for x in torch.rand(4, 2, 3):
                loss = model(x).pow(2).mean()
                loss.backward()
                running_loss += loss.detach()
            print(f"loss {running_loss / 4:.3f}")
            """,
        ),
        Invalid(
            """
            import torch.nn.functional as F
            from torch import nn
            layer = nn.Linear(2, 2)
            losses = []
            for x in [1.0, 2.0]:
                pred = layer.weight * x
                loss = F.mse_loss(pred, layer.bias)
                loss.backward()
                losses.append(loss)
            print(sum(losses) / len(losses))
            """,
            """
            import torch.nn.functional as F
            from torch import nn
            layer = nn.Linear(2, 2)
            losses = []
            for x in [1.0, 2.0]:
                pred = layer.weight * x
                loss = F.mse_loss(pred, layer.bias)
                loss.backward()
                losses.append(loss.detach())
            print(sum(losses) / len(losses))
            """,
        ),
        Invalid(
            """
            import torch
            model = torch.nn.Linear(3, 1)


            def train_epoch(batches):
                total = 0
                for x in batches:
                    loss = model(x).pow(2).mean()
                    loss.backward()
                    total = total + loss  # unsafe: the caller may backpropagate through it
                return total / len(batches)
            """,
            """
            import torch
            model = torch.nn.Linear(3, 1)


            def train_epoch(batches):
                total = 0
                for x in batches:
                    loss = model(x).pow(2).mean()
                    loss.backward()
                    total = total + loss.detach()  # unsafe: the caller may backpropagate through it
                return total / len(batches)
            """,
        ),
    ]

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        if isinstance(node.operator, cst.AddAssign) and isinstance(node.target, cst.Name):
            self._check(node, node.target, node.value, list_accumulator=False)

    def visit_Assign(self, node: cst.Assign) -> None:
        value = node.value
        if len(node.targets) != 1 or not isinstance(node.targets[0].target, cst.Name):
            return
        target = node.targets[0].target
        if (
            isinstance(value, cst.BinaryOperation)
            and isinstance(value.operator, cst.Add)
            and isinstance(value.left, cst.Name)
            and value.left.value == target.value
        ):
            self._check(node, target, value.right, list_accumulator=False)

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if (
            isinstance(func, cst.Attribute)
            and func.attr.value == "append"
            and isinstance(func.value, cst.Name)
            and len(node.args) == 1
            and node.args[0].keyword is None
            and not node.args[0].star
            and isinstance(
                self.analysis.parent(self.analysis.parent(node)), cst.SimpleStatementLine
            )
        ):
            self._check(node, func.value, node.args[0].value, list_accumulator=True)

    def _check(
        self,
        node: cst.CSTNode,
        accumulator: cst.Name,
        value: cst.BaseExpression,
        *,
        list_accumulator: bool,
    ) -> None:
        analysis = self.analysis
        if not self._in_loop(node) or analysis.in_no_grad(node):
            return
        if not analysis.requires_grad(value, node):
            return
        if not self._starts_empty(accumulator, node, list_accumulator):
            return
        verdict = self._only_logged(accumulator.value, node, {node}, 0)
        if verdict is None:
            return
        self.report(node, fix=self._fix(value, returned=verdict == "returned"))

    def _fix(self, value: cst.BaseExpression, *, returned: bool) -> Fix:
        receiver = value
        if not isinstance(value, (cst.Name, cst.Attribute, cst.Call, cst.Subscript)):
            receiver = value.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
        detached = cst.Call(cst.Attribute(receiver, cst.Name("detach")))
        safety = FixSafety.UNSAFE if returned else None
        return self.fix([Edit(value, detached)], "Accumulate `loss.detach()`", safety=safety)

    def _in_loop(self, node: cst.CSTNode) -> bool:
        """``node`` runs once per iteration of a loop of its own function."""
        for ancestor in self.analysis.ancestors(node):
            if isinstance(ancestor, (cst.For, cst.While)):
                return True
            if isinstance(ancestor, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
                return False
        return False

    def _starts_empty(self, accumulator: cst.Name, at: cst.CSTNode, list_accumulator: bool) -> bool:
        """The total starts as a Python ``0`` (or the history as ``[]``) before the loop."""
        binding = self.analysis.reaching_binding(accumulator, at)
        if binding is None or binding.kind != "assign" or binding.value is None:
            return False
        if list_accumulator:
            return isinstance(binding.value, cst.List) and not binding.value.elements
        return isinstance(binding.value, (cst.Integer, cst.Float))

    def _only_logged(
        self, name: str, origin: cst.CSTNode, own: set[cst.CSTNode], depth: int
    ) -> str | None:
        """``"logged"`` / ``"returned"`` when every use of ``name`` in ``origin``'s scope only
        logs it (or returns it); ``None`` when some use may reach the graph."""
        if depth > MAX_DEPTH:
            return None
        scope = self.analysis.scope_of(origin).node
        verdict = "logged"
        for use in _names(scope, name):
            if any(self.analysis.contains(stmt, use) for stmt in own):
                continue
            kind = self._use_kind(use, origin, depth)
            if kind is None:
                return None
            if kind == "returned":
                verdict = kind
        return verdict

    def _use_kind(self, use: cst.Name, origin: cst.CSTNode, depth: int) -> str | None:
        analysis = self.analysis
        node: cst.CSTNode = use
        while True:
            parent = analysis.parent(node)
            if parent is None:
                return None
            if isinstance(parent, (cst.AssignTarget, cst.AugAssign)) and _target_is(parent, node):
                return self._rebinding_kind(parent)
            if isinstance(parent, (cst.FormattedStringExpression, cst.Comparison)):
                return "logged"
            if isinstance(parent, cst.Arg):
                node = parent
                continue
            if isinstance(parent, cst.Call):
                kind = self._call_kind(parent, node)
                if kind == "pass":
                    node = parent
                    continue
                return kind
            if isinstance(parent, cst.Attribute) and parent.value is node:
                if parent.attr.value in ("item", "tolist"):
                    return "logged"
                if parent.attr.value in ("format",) and isinstance(node, cst.SimpleString):
                    return "logged"
                return None
            if isinstance(parent, cst.BinaryOperation):
                if isinstance(parent.operator, cst.Modulo) and isinstance(
                    parent.left, (cst.SimpleString, cst.ConcatenatedString)
                ):
                    return "logged"
                node = parent
                continue
            if isinstance(parent, (cst.Subscript, cst.SubscriptElement, cst.Index)):
                if isinstance(parent, cst.Subscript) and parent.value is not node:
                    return None  # used as an index
                node = parent
                continue
            if isinstance(
                parent,
                (cst.UnaryOperation, cst.Element, cst.Tuple, cst.List, cst.DictElement, cst.Dict),
            ):
                node = parent
                continue
            if isinstance(parent, cst.Return):
                return self._returned_kind(parent)
            if isinstance(parent, cst.Assign):
                return self._assigned_kind(parent, origin, depth)
            if isinstance(parent, (cst.If, cst.While)) and parent.test is node:
                return "logged"
            return None

    def _call_kind(self, call: cst.Call, arg: cst.CSTNode) -> str | None:
        """What a call does with ``arg``: logs it, passes it on (``"pass"``), or unknown."""
        if arg is call.func:
            return None
        func = call.func
        if isinstance(func, cst.Name) and func.value in LOG_FUNCTIONS:
            return "logged"
        qualified = self.analysis.qualified_name(func) or ""
        if qualified.startswith("torch."):
            return None
        if isinstance(func, cst.Name) and func.value in PASS_THROUGH_FUNCTIONS:
            return "pass"
        if isinstance(func, cst.Attribute):
            if func.attr.value in PASS_THROUGH_FUNCTIONS and qualified.split(".")[0] in (
                "numpy",
                "statistics",
            ):
                return "pass"
            if func.attr.value in LOG_METHODS:
                return "logged"
            if func.attr.value == "append" and isinstance(func.value, cst.Name):
                return self._history_kind(call, func.value)
        return None

    def _history_kind(self, call: cst.Call, history: cst.Name) -> str | None:
        statement = self.analysis.parent(call)
        if not isinstance(statement, cst.Expr):
            return None
        if not self._starts_empty(history, call, True):
            return None
        return self._only_logged(history.value, call, {call}, MAX_DEPTH - 1)

    def _assigned_kind(self, assign: cst.Assign, origin: cst.CSTNode, depth: int) -> str | None:
        """``avg = total / n``: the new name must itself be only logged."""
        if len(assign.targets) != 1 or not isinstance(assign.targets[0].target, cst.Name):
            return None
        name = assign.targets[0].target.value
        return self._only_logged(name, assign, {assign}, depth + 1)

    def _rebinding_kind(self, parent: cst.CSTNode) -> str | None:
        """A reset of the total (``total = 0``) is fine; other rebindings are unknown."""
        if isinstance(parent, cst.AugAssign):
            return None
        assign = self.analysis.parent(parent)
        if isinstance(assign, cst.Assign) and isinstance(
            assign.value, (cst.Integer, cst.Float, cst.List)
        ):
            if not isinstance(assign.value, cst.List) or not assign.value.elements:
                return "logged"
        return None

    def _returned_kind(self, ret: cst.Return) -> str | None:
        """Returning the total from a training step that backpropagates its own loss."""
        function = self.analysis.enclosing_function(ret)
        if function is None or not _calls_backward(function):
            return None
        return "returned"


def _target_is(parent: cst.CSTNode, node: cst.CSTNode) -> bool:
    return getattr(parent, "target", None) is node


class _NameFinder(cst.CSTVisitor):
    def __init__(self, name: str) -> None:
        self.name = name
        self.found: list[cst.Name] = []

    def visit_Name(self, node: cst.Name) -> None:
        if node.value == self.name:
            self.found.append(node)


def _names(scope: cst.CSTNode, name: str) -> list[cst.Name]:
    finder = _NameFinder(name)
    walk(scope, finder)
    return finder.found


class _BackwardFinder(cst.CSTVisitor):
    def __init__(self) -> None:
        self.found = False

    def visit_Call(self, node: cst.Call) -> None:
        if isinstance(node.func, cst.Attribute) and node.func.attr.value == "backward":
            self.found = True


def _calls_backward(function: cst.FunctionDef) -> bool:
    finder = _BackwardFinder()
    walk(function, finder)
    return finder.found
