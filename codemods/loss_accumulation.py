"""GF403 loss-accumulation."""

from __future__ import annotations

import ast

import libcst as cst

from gradfix.edits import Editor
from gradfix.rule import Edit, FixPlan, FixSafety, Invalid, Rule, Valid
from gradfix.semantic.syntax import is_backward_call, spelled_names

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
_LOOPS = (ast.For, ast.AsyncFor, ast.While)
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
#: Nodes a use passes through unchanged on its way to what consumes it.
_CONTAINERS = (ast.UnaryOp, ast.Tuple, ast.List, ast.Dict)


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

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        if type(node.op) is ast.Add and type(node.target) is ast.Name:
            self._check(node, node.target, node.value, list_accumulator=False)

    def visit_Assign(self, node: ast.Assign) -> None:
        value = node.value
        if len(node.targets) != 1 or type(node.targets[0]) is not ast.Name:
            return
        target = node.targets[0]
        if (
            type(value) is ast.BinOp
            and type(value.op) is ast.Add
            and type(value.left) is ast.Name
            and value.left.id == target.id
        ):
            self._check(node, target, value.right, list_accumulator=False)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if (
            type(func) is ast.Attribute
            and func.attr == "append"
            and type(func.value) is ast.Name
            and len(node.args) == 1
            and not node.keywords
            and type(node.args[0]) is not ast.Starred
            and self._is_statement_line(node)
        ):
            self._check(node, func.value, node.args[0], list_accumulator=True)

    def _is_statement_line(self, call: ast.Call) -> bool:
        """``call`` is an expression statement on a line of its own block (not in a
        one-line suite such as ``if c: losses.append(loss)``)."""
        statement = self.analysis.parent(call)
        return type(statement) is ast.Expr and not self.analysis.in_one_line_suite(statement)

    def _check(
        self,
        node: ast.stmt | ast.Call,
        accumulator: ast.Name,
        value: ast.expr,
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
        verdict = self._only_logged(accumulator.id, node, {node}, 0)
        if verdict is None:
            return
        self.report(node, fix=self._fix(value, returned=verdict == "returned"))

    def _fix(self, value: ast.expr, *, returned: bool) -> FixPlan:
        def build(editor: Editor) -> list[Edit]:
            receiver = editor.node(value)
            assert isinstance(receiver, cst.BaseExpression)
            if not isinstance(receiver, (cst.Name, cst.Attribute, cst.Call, cst.Subscript)):
                receiver = receiver.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
            detached = cst.Call(cst.Attribute(receiver, cst.Name("detach")))
            return [Edit(editor.node(value), detached)]

        safety = FixSafety.UNSAFE if returned else None
        return self.plan(build, "Accumulate `loss.detach()`", safety=safety)

    def _in_loop(self, node: ast.AST) -> bool:
        """``node`` runs once per iteration of a loop of its own function."""
        for ancestor in self.analysis.ancestors(node):
            if isinstance(ancestor, _LOOPS):
                return True
            if isinstance(ancestor, _FUNCTIONS):
                return False
        return False

    def _starts_empty(self, accumulator: ast.Name, at: ast.AST, list_accumulator: bool) -> bool:
        """The total starts as a Python ``0`` (or the history as ``[]``) before the loop."""
        binding = self.analysis.reaching_binding(accumulator, at)
        if binding is None or binding.kind != "assign" or binding.value is None:
            return False
        if list_accumulator:
            return type(binding.value) is ast.List and not binding.value.elts
        return _is_number(binding.value)

    def _only_logged(self, name: str, origin: ast.AST, own: set[ast.AST], depth: int) -> str | None:
        """``"logged"`` / ``"returned"`` when every use of ``name`` in ``origin``'s scope only
        logs it (or returns it); ``None`` when some use may reach the graph.

        Every identifier spelled ``name`` counts: an attribute, a parameter or a function
        of that name is an unknown use."""
        if depth > MAX_DEPTH:
            return None
        scope = self.analysis.scope_of(origin).node
        verdict = "logged"
        for use in _spellings(scope, name):
            if any(self.analysis.contains(stmt, use) for stmt in own):
                continue
            kind = self._use_kind(use, origin, depth)
            if kind is None:
                return None
            if kind == "returned":
                verdict = kind
        return verdict

    def _use_kind(self, use: ast.AST, origin: ast.AST, depth: int) -> str | None:
        if type(use) is not ast.Name and type(use) is not ast.keyword:
            return None  # ``self.total``, ``def total``: unknown
        analysis = self.analysis
        node: ast.AST = use
        while True:
            parent = analysis.parent(node)
            if parent is None:
                return None
            if isinstance(parent, ast.Assign) and any(t is node for t in parent.targets):
                return self._rebinding_kind(parent)
            if isinstance(parent, ast.AugAssign) and parent.target is node:
                return None  # another total: unknown
            if isinstance(parent, (ast.FormattedValue, ast.Compare)):
                return "logged"
            if isinstance(parent, ast.keyword) or (
                isinstance(parent, ast.Starred) and type(analysis.parent(parent)) is ast.Call
            ):
                node = parent  # ``f(x=total)``, ``f(*total)``: an argument
                continue
            if isinstance(parent, ast.Call):
                kind = self._call_kind(parent, node)
                if kind == "pass":
                    node = parent
                    continue
                return kind
            if isinstance(parent, ast.Attribute):
                return _attribute_kind(parent)
            if isinstance(parent, ast.BinOp):
                if type(parent.op) is ast.Mod and _is_string(parent.left):
                    return "logged"
                node = parent
                continue
            if isinstance(parent, ast.Subscript):
                if parent.value is not node:
                    return None  # used as an index
                node = parent
                continue
            if isinstance(parent, ast.Dict) and _unpacked_in(parent, node):
                return None  # ``{**total}``
            if isinstance(parent, _CONTAINERS):
                node = parent
                continue
            if isinstance(parent, ast.Return):
                return self._returned_kind(parent)
            if isinstance(parent, ast.Assign):
                return self._assigned_kind(parent, origin, depth)
            if isinstance(parent, (ast.If, ast.While)) and parent.test is node:
                return "logged"
            return None

    def _call_kind(self, call: ast.Call, arg: ast.AST) -> str | None:
        """What a call does with ``arg``: logs it, passes it on (``"pass"``), or unknown."""
        if arg is call.func:
            return None
        func = call.func
        if type(func) is ast.Name and func.id in LOG_FUNCTIONS:
            return "logged"
        qualified = self.analysis.qualified_name(func) or ""
        if qualified.startswith("torch."):
            return None
        if type(func) is ast.Name and func.id in PASS_THROUGH_FUNCTIONS:
            return "pass"
        if type(func) is ast.Attribute:
            if func.attr in PASS_THROUGH_FUNCTIONS and qualified.split(".")[0] in (
                "numpy",
                "statistics",
            ):
                return "pass"
            if func.attr in LOG_METHODS:
                return "logged"
            if func.attr == "append" and type(func.value) is ast.Name:
                return self._history_kind(call, func.value)
        return None

    def _history_kind(self, call: ast.Call, history: ast.Name) -> str | None:
        if type(self.analysis.parent(call)) is not ast.Expr:
            return None
        if not self._starts_empty(history, call, True):
            return None
        return self._only_logged(history.id, call, {call}, MAX_DEPTH - 1)

    def _assigned_kind(self, assign: ast.Assign, origin: ast.AST, depth: int) -> str | None:
        """``avg = total / n``: the new name must itself be only logged."""
        if len(assign.targets) != 1 or type(assign.targets[0]) is not ast.Name:
            return None
        name = assign.targets[0].id
        return self._only_logged(name, assign, {assign}, depth + 1)

    def _rebinding_kind(self, assign: ast.Assign) -> str | None:
        """A reset of the total (``total = 0``) is fine; other rebindings are unknown."""
        value = assign.value
        if _is_number(value) or (type(value) is ast.List and not value.elts):
            return "logged"
        return None

    def _returned_kind(self, ret: ast.Return) -> str | None:
        """Returning the total from a training step that backpropagates its own loss."""
        function = self.analysis.enclosing_function(ret)
        if function is None or not _calls_backward(function):
            return None
        return "returned"


def _is_number(expr: ast.expr) -> bool:
    """An int or float literal (``True`` is not one)."""
    return type(expr) is ast.Constant and type(expr.value) in (int, float)


def _is_string(expr: ast.expr) -> bool:
    """A string literal: the format of ``"%.3f" % total``."""
    return type(expr) is ast.Constant and type(expr.value) in (str, bytes)


def _attribute_kind(attribute: ast.Attribute) -> str | None:
    """``total.item()`` logs the total; another attribute of it is unknown."""
    if attribute.attr in ("item", "tolist"):
        return "logged"
    return None


def _unpacked_in(mapping: ast.Dict, node: ast.AST) -> bool:
    return any(key is None and value is node for key, value in zip(mapping.keys, mapping.values))


def _spellings(scope: ast.AST, name: str) -> list[ast.AST]:
    """Every node under ``scope`` that spells the identifier ``name``: variables, and the
    attributes, keywords, parameters, definitions and imports of that name."""
    return [node for node in ast.walk(scope) if name in spelled_names(node)]


def _calls_backward(function: ast.AST) -> bool:
    return any(type(node) is ast.Call and is_backward_call(node) for node in ast.walk(function))
