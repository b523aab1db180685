"""GF407 eval-without-no-grad."""

from __future__ import annotations

import ast

import libcst as cst

from gradfix.edits import Editor
from gradfix.rule import Edit, FixPlan, FixSafety, Invalid, Rule, Valid
from gradfix.semantic.syntax import normalized_code
from gradfix.torch_facts import GRAD_CUTTING_METHODS

#: calls that show a function trains (or needs gradients): then its graphs are wanted
_TRAINING_METHODS = frozenset({"backward", "step", "train", "zero_grad", "requires_grad_"})
_STORING_METHODS = frozenset({"append", "extend", "insert"})
_LOOPS = (ast.For, ast.AsyncFor, ast.While)


class EvalWithoutNoGrad(Rule):
    """
    ## What it does
    Finds an evaluation function (it calls `model.eval()` and never backpropagates,
    steps an optimizer or switches back to `train()`) that runs the model in a loop
    outside `torch.no_grad()` and keeps the outputs across iterations
    (`outputs.append(output)`, `total += output.sum()`, `torch.cat([all, output])`), and
    wraps the model call in `with torch.no_grad():`.

    ## Why is this bad?
    `model.eval()` switches dropout and batch norm to inference; it does not stop
    autograd. Each output that requires grad keeps the graph of its forward pass alive,
    with every activation saved for a backward that never comes. Kept across the loop,
    they pile up: memory grows with the size of the validation set until it runs out.

    ## Example
    ```python
    def validate(model, loader):
        model.eval()
        outputs = []
        for x, _ in loader:
            output = model(x)
            outputs.append(output)
        return torch.cat(outputs)
    ```

    ## Use instead
    ```python
    def validate(model, loader):
        model.eval()
        outputs = []
        for x, _ in loader:
            with torch.no_grad():
                output = model(x)
            outputs.append(output)
        return torch.cat(outputs)
    ```

    (Decorating the whole function with `@torch.no_grad()` does the same.) Not reported:
    a function that backpropagates (Grad-CAM, saliency, test-time adaptation) or whose
    result a backward of the file reads, outputs kept only as numbers (`.item()`,
    `.detach()`, `.argmax()`), and code already under `no_grad` / `inference_mode` /
    `set_grad_enabled(False)`.

    ## Fix safety
    The model computes the same outputs; they only stop recording the graph that nothing
    in the file backpropagates. Safe when the function returns nothing computed from the
    kept outputs; unsafe when it does (`return torch.cat(outputs)`): a caller in another
    file could backpropagate it, which the fix would stop.
    """

    code = "GF407"
    name = "eval-without-no-grad"
    synopsis = (
        "Finds an evaluation loop that keeps model outputs outside `torch.no_grad()`, "
        "each holding its graph, and runs the model under `torch.no_grad()`."
    )
    message = (
        "Evaluation loop keeps model outputs that record their graph (no `torch.no_grad()`): "
        "memory grows with every batch; run the model under `torch.no_grad()`"
    )
    fix_safety = FixSafety.SAFE
    fix_safeties = (FixSafety.SAFE, FixSafety.UNSAFE)

    VALID = [
        Valid(
            """
            import torch

            @torch.no_grad()
            def evaluate(model, loader):
                model.eval()
                outputs = []
                for x, _ in loader:
                    outputs.append(model(x))
                return torch.cat(outputs)

            def accuracy(model, loader):
                model.eval()
                correct, scores = 0, []
                for x, y in loader:
                    logits = model(x)
                    correct += (logits.argmax(1) == y).sum().item()
                    scores.append(logits.detach().cpu())
                return correct, scores

            def saliency(model, images):
                model.eval()
                maps = []
                for image in images:
                    image.requires_grad_()
                    model(image).max().backward()
                    maps.append(image.grad.abs())
                return maps
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            import torch.nn as nn

            def validate(val_loader, model, criterion):
                model.eval()
                outputs, total = [], 0.0
                for i, (images, target) in enumerate(val_loader):
                    # one batch
                    output = model(images)
                    outputs.append(output)
                    total += criterion(output, target)
                return torch.cat(outputs), total
            """,
            """
            import torch
            import torch.nn as nn

            def validate(val_loader, model, criterion):
                model.eval()
                outputs, total = [], 0.0
                for i, (images, target) in enumerate(val_loader):
                    # one batch
                    with torch.no_grad():
                        output = model(images)
                    outputs.append(output)
                    total += criterion(output, target)
                return torch.cat(outputs), total
            """,
        ),
        Invalid(
            """
            import torch as th

            class Evaluator:
                def __init__(self, net):
                    self.net = net

                def run(self, batches):
                    self.net.eval()
                    preds = None
                    for x in batches:
                        out = th.softmax(self.net(x), dim=1)
                        preds = out if preds is None else th.cat([preds, out])
                    return preds

            evaluator = Evaluator(th.nn.Linear(4, 2))
            print(evaluator.run([th.randn(3, 4)]).shape)
            """,
            """
            import torch as th

            class Evaluator:
                def __init__(self, net):
                    self.net = net

                def run(self, batches):
                    self.net.eval()
                    preds = None
                    for x in batches:
                        with th.no_grad():
                            out = th.softmax(self.net(x), dim=1)
                        preds = out if preds is None else th.cat([preds, out])
                    return preds

            evaluator = Evaluator(th.nn.Linear(4, 2))
            print(evaluator.run([th.randn(3, 4)]).shape)
            """,
        ),
        Invalid(
            """
            import torch
            import torch.nn.functional as F

            def val_loss(model, loader):
                model.eval()
                losses = []
                for x, y in loader:
                    loss = F.mse_loss(model(x), y)
                    losses.append(loss)
                return torch.stack(losses).mean().item()
            """,
            """
            import torch
            import torch.nn.functional as F

            def val_loss(model, loader):
                model.eval()
                losses = []
                for x, y in loader:
                    with torch.no_grad():
                        loss = F.mse_loss(model(x), y)
                    losses.append(loss)
                return torch.stack(losses).mean().item()
            """,
        ),
    ]

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        if not self.analysis.attributes_named("eval"):
            return  # no ``.eval()`` anywhere in the file: the cheap gate
        models = self._evaluated_models(node)
        if not models or self._trains(node) or self.analysis.in_no_grad(node):
            return
        if self._result_backpropagated(node):
            return
        for loop in self._loops(node):
            for statement, call in self._model_calls(loop, models):
                kept = self._kept_across_iterations(statement, loop)
                if kept is not None:
                    returned = self._returns_graph(node, {kept, statement.targets[0].id})  # type: ignore[attr-defined]
                    self.report(call, fix=self._wrap(statement, returned))

    # -- the function ----------------------------------------------------------------------
    def _evaluated_models(self, function: ast.FunctionDef) -> set[str]:
        """The models ``function`` (not a function nested in it) puts in eval mode:
        ``model`` of ``model.eval()``, as ``normalized`` code."""
        models = set()
        for attr in self.analysis.attributes_named("eval"):
            model, call = attr.value, self.analysis.parent(attr)
            if type(call) is ast.Call and call.func is attr and not call.args:
                if self.analysis.enclosing_function(call) is function:
                    models.add(normalized_code(model))
        return models

    def _trains(self, function: ast.FunctionDef) -> bool:
        """It backpropagates, steps, switches to ``train()``, or asks for gradients."""
        for call in self.analysis.descendants(function, ast.Call):
            func = call.func
            if type(func) is ast.Attribute and func.attr in _TRAINING_METHODS:
                return True
            name = self.analysis.call_name(call) or ""
            if name in ("torch.autograd.grad", "torch.enable_grad", "torch.set_grad_enabled"):
                return True
        return False

    def _result_backpropagated(self, function: ast.FunctionDef) -> bool:
        """A backward call of the file reads a value bound from a call of ``function``."""
        for call in self.analysis.descendants(self.analysis.module, ast.Call):
            func = call.func
            called = func.attr if type(func) is ast.Attribute else getattr(func, "id", None)
            if called != function.name:
                continue
            statement = self.analysis.parent(call)
            if type(statement) is not ast.Assign:
                continue
            names = {t.id for t in ast.walk(statement.targets[0]) if type(t) is ast.Name}
            scope = self.analysis.scope_of(statement).node
            for root, _ in self.analysis.backward_roots(scope):
                if any(type(n) is ast.Name and n.id in names for n in ast.walk(root)):
                    return True
        return False

    def _loops(self, function: ast.FunctionDef) -> list[ast.stmt]:
        loops: list[ast.stmt] = []
        for kind in _LOOPS:
            loops += [
                loop
                for loop in self.analysis.descendants(function, kind)
                if self.analysis.enclosing_function(loop) is function
            ]
        return loops

    # -- the model call and what keeps its output ------------------------------------------
    def _model_calls(self, loop: ast.stmt, models: set[str]) -> list[tuple[ast.Assign, ast.Call]]:
        """``out = model(x)`` (or an op of it, ``softmax(model(x))``) statements of the loop
        body, outside ``no_grad``, calling a model put in eval mode; one per statement."""
        found = []
        for statement in self.analysis.descendants(loop, ast.Assign):
            if self.analysis.in_no_grad(statement) or len(statement.targets) != 1:
                continue
            if type(statement.targets[0]) is not ast.Name:
                continue
            for call in self.analysis.descendants(statement.value, ast.Call):
                if normalized_code(call.func) in models and self._keeps_graph(call, statement):
                    found.append((statement, call))
                    break
        return found

    def _keeps_graph(self, call: ast.Call, statement: ast.Assign) -> bool:
        """No ``.detach()`` / ``.item()`` / ``.argmax()`` between the call and the value."""
        for ancestor in self.analysis.ancestors(call):
            if ancestor is statement:
                return True
            if type(ancestor) is ast.Call and type(ancestor.func) is ast.Attribute:
                if ancestor.func.attr in GRAD_CUTTING_METHODS:
                    return False
        return True

    def _kept_across_iterations(self, statement: ast.Assign, loop: ast.stmt) -> str | None:
        """The name of what keeps the statement's value (an output of the model) beyond
        the iteration: a list it is appended to, a total it is added to, a tensor it is
        concatenated to."""
        target = statement.targets[0]
        assert isinstance(target, ast.Name)
        for use in self.analysis.name_nodes_in(loop, target.id):
            binding = self.analysis.reaching_binding(use)
            if use is target or binding is None or binding.node is not statement:
                continue
            keeper = self._keeper(use, loop)
            if keeper is not None:
                return keeper
        return None

    def _keeper(self, use: ast.Name, loop: ast.stmt) -> str | None:
        for ancestor in self.analysis.ancestors(use):
            if isinstance(ancestor, ast.stmt):
                return self._accumulator(ancestor, use, loop)
            if type(ancestor) is ast.Call and type(ancestor.func) is ast.Attribute:
                method, receiver = ancestor.func.attr, ancestor.func.value
                if method in GRAD_CUTTING_METHODS:
                    return None  # ``.item()``, ``.detach()``, ``.argmax()``: no graph kept
                if method in _STORING_METHODS:
                    outside = type(receiver) is ast.Name and self._outside(receiver.id, loop)
                    return receiver.id if outside else None  # type: ignore[attr-defined]
        return None

    def _accumulator(self, statement: ast.stmt, use: ast.Name, loop: ast.stmt) -> str | None:
        """``total`` of ``total += f(out)`` or of ``total = cat([total, out])``, bound
        before the loop."""
        target: ast.expr | None = None
        if type(statement) is ast.AugAssign:
            target = statement.target
        elif type(statement) is ast.Assign and len(statement.targets) == 1:
            target = statement.targets[0]
            value = statement.value
            if type(target) is not ast.Name or not _reads(value, target.id) or target.id == use.id:
                return None
        if type(target) is ast.Name and self._outside(target.id, loop):
            return target.id
        return None

    def _returns_graph(self, function: ast.FunctionDef, kept: set[str]) -> bool:
        """``function`` returns something computed from the kept outputs: a caller in
        another file could backpropagate it."""
        tainted = set(kept)
        for statement in self.analysis.descendants(function, ast.Assign):
            if any(_reads(statement.value, name) for name in tainted):
                tainted |= {t.id for t in ast.walk(statement.targets[0]) if type(t) is ast.Name}
        returns = self.analysis.descendants(function, ast.Return)
        return any(r.value is not None and _returns_tensor_of(r.value, tainted) for r in returns)

    def _outside(self, name: str, loop: ast.stmt) -> bool:
        """``name`` is bound before the loop in the same function (it outlives it)."""
        function = self.analysis.enclosing_function(loop)
        if function is None:
            return False
        for node in self.analysis.name_nodes_in(function, name):
            if type(node.ctx) is ast.Store and self.analysis.index(node) < self.analysis.index(
                loop
            ):
                return True
        return False

    # -- the fix ---------------------------------------------------------------------------
    def _wrap(self, statement: ast.Assign, returned: bool) -> FixPlan:
        def build(editor: Editor) -> list[Edit] | None:
            line = editor.statement(statement)
            if not isinstance(line, cst.SimpleStatementLine) or len(line.body) != 1:
                return None
            return editor.wrap_in_no_grad([line])

        imports = () if self.analysis.torch_alias() else ("torch",)
        safety = FixSafety.UNSAFE if returned else FixSafety.SAFE
        description = "Run the model under `torch.no_grad()`"
        return self.plan(build, description, imports=imports, safety=safety)


def _reads(expr: ast.AST, name: str) -> bool:
    return any(type(node) is ast.Name and node.id == name for node in ast.walk(expr))


def _returns_tensor_of(expr: ast.AST, names: set[str]) -> bool:
    """``expr`` reads one of ``names`` other than through ``.item()``, ``.detach()``..."""
    if type(expr) is ast.Call and type(expr.func) is ast.Attribute:
        if expr.func.attr in GRAD_CUTTING_METHODS:
            return False
    if type(expr) is ast.Name:
        return expr.id in names
    return any(_returns_tensor_of(child, names) for child in ast.iter_child_nodes(expr))
