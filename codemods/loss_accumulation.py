"""GF403 loss-accumulation."""

from __future__ import annotations

import ast

import libcst as cst

from gradfix.edits import Editor
from gradfix.rule import Edit, FixAvailability, FixPlan, FixSafety, Invalid, Rule, Valid
from gradfix.semantic import FACTORIES, argument, is_true
from gradfix.semantic.grad import access_path
from gradfix.semantic.syntax import is_backward_call

#: Calls that turn their argument into something printed or logged.
LOG_FUNCTIONS = frozenset(
    "print float int round str repr len format bool any all isinstance type".split()
)
#: Torch functions that only inspect a tensor.
INSPECTING_TORCH = frozenset({"torch.is_tensor", "torch.numel"})
#: Attributes that describe a tensor without reading its graph.
INSPECTED_ATTRIBUTES = frozenset(
    "item tolist grad_fn requires_grad is_leaf shape dtype device ndim".split()
)
#: Methods of a meter object of this file that record a value (``meter.update(loss, n)``).
RECORDING_METHODS = frozenset({"update", "add", "record", "append"})
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
_COMPREHENSIONS = (ast.GeneratorExp, ast.ListComp, ast.SetComp)


class LossAccumulation(Rule):
    """
    ## What it does
    Finds a loss that requires grad summed into a running total (`total_loss += loss`,
    `total = total + loss`) or appended to a history list (`losses.append(loss)`) inside a
    loop, when the total is only logged, and detaches the accumulated value. Also a loss
    recorded by a meter of this file (`meter.update(loss, n)`: recorded as `loss.item()`),
    a container holding a loss appended to a history (`history.append(out)` after
    `out["loss"].backward()`: `out["loss"]` is detached first), and a running total created
    with `requires_grad=True` (`total += loss` on that leaf raises: the fix drops
    `requires_grad`). A loss counts as requiring grad when it is backpropagated in the same
    function, whatever made it (an imported function, a model returning `.loss`).

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
    `torch.no_grad()` or already detached with `.item()` / `.detach()`. `.item()` for a
    meter only when the loss is the root of a `.backward()` without arguments (a scalar).
    Dropping `requires_grad=True` from a running total is safe: the original raises at the
    first `+=`, and a total whose `.grad` is read or that an optimizer steps is not touched.
    """

    code = "GF403"
    assign_targets = frozenset({ast.Name})  # visit_Assign: ``total = total + loss``
    calls = RECORDING_METHODS
    name = "loss-accumulation"
    synopsis = (
        "Finds losses kept in a running total or a history for logging, which keeps "
        "every graph alive, and detaches them (`loss.detach()`, `.item()`)."
    )
    message = "Accumulating a loss that requires grad keeps every iteration's graph alive"
    fix_safety = FixSafety.SAFE
    fix_safeties = (FixSafety.SAFE, FixSafety.UNSAFE)
    fix_availability = FixAvailability.ALWAYS
    LEAF_MESSAGE = (
        "Running total created with `requires_grad=True`: `+=` of a loss on that leaf raises; "
        "create it without `requires_grad`"
    )

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
        Valid(
            """
            import torch
            from metrics import Accuracy
            model = torch.nn.Linear(3, 2)
            accuracy = Accuracy()
            for x, y in zip(torch.rand(4, 2, 3), torch.randint(0, 2, (4, 2))):
                logits = model(x)
                loss = torch.nn.functional.cross_entropy(logits, y)
                loss.backward()
                accuracy.update(logits, y)  # a class gradfix cannot see: its own business
            print(accuracy.compute())
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
        Invalid(
            """
            import torch
            from losses import contrastive_loss  # not known to require grad, but backpropagated
            encoder = torch.nn.Linear(3, 2)
            epoch_loss = torch.tensor(0.0)
            for batch in torch.rand(4, 2, 3):
                loss = contrastive_loss(encoder(batch))
                epoch_loss += loss
                loss.backward()
            print("epoch", epoch_loss.item() / 4)
            """,
            """
            import torch
            from losses import contrastive_loss  # not known to require grad, but backpropagated
            encoder = torch.nn.Linear(3, 2)
            epoch_loss = torch.tensor(0.0)
            for batch in torch.rand(4, 2, 3):
                loss = contrastive_loss(encoder(batch))
                epoch_loss += loss.detach()
                loss.backward()
            print("epoch", epoch_loss.item() / 4)
            """,
        ),
        Invalid(
            """
            import torch


            class RunningMean:
                def __init__(self):
                    self.total, self.n = 0.0, 0

                def update(self, value, n=1):
                    self.total += value * n
                    self.n += n


            def fit(net, batches, opt):
                losses = RunningMean()
                for x, y in batches:
                    result = {"loss": torch.nn.functional.mse_loss(net(x), y)}
                    opt.zero_grad()
                    result["loss"].backward()
                    opt.step()
                    losses.update(result["loss"], len(x))
                print(losses.total / losses.n)
            """,
            """
            import torch


            class RunningMean:
                def __init__(self):
                    self.total, self.n = 0.0, 0

                def update(self, value, n=1):
                    self.total += value * n
                    self.n += n


            def fit(net, batches, opt):
                losses = RunningMean()
                for x, y in batches:
                    result = {"loss": torch.nn.functional.mse_loss(net(x), y)}
                    opt.zero_grad()
                    result["loss"].backward()
                    opt.step()
                    losses.update(result["loss"].item(), len(x))
                print(losses.total / losses.n)
            """,
        ),
        Invalid(
            """
            import torch
            from steps import train_step
            history = []
            for batch in torch.rand(3, 2, 3):
                out = train_step(batch)
                out.loss.backward()
                # kept for the epoch summary
                history.append(out)
            print(any(o.loss.requires_grad for o in history))
            """,
            """
            import torch
            from steps import train_step
            history = []
            for batch in torch.rand(3, 2, 3):
                out = train_step(batch)
                out.loss.backward()
                # kept for the epoch summary
                out.loss = out.loss.detach()
                history.append(out)
            print(any(o.loss.requires_grad for o in history))
            """,
        ),
        Invalid(
            """
            import torch
            model = torch.nn.Linear(3, 1)
            total = torch.zeros(1, requires_grad=True)
            for x in torch.rand(4, 2, 3):
                total += model(x).pow(2).mean()
            total.backward()
            """,
            """
            import torch
            model = torch.nn.Linear(3, 1)
            total = torch.zeros(1)
            for x in torch.rand(4, 2, 3):
                total += model(x).pow(2).mean()
            total.backward()
            """,
        ),
    ]

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        leaf_factory = self.analysis.leaf_accumulator(node)
        if leaf_factory is not None:
            if not self.analysis.in_no_grad(node):
                self.report(node, self.LEAF_MESSAGE, fix=self._leaf_fix(leaf_factory))
            return
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
            type(func) is not ast.Attribute
            or type(func.value) is not ast.Name
            or not node.args
            or type(node.args[0]) is ast.Starred
            or func.attr not in RECORDING_METHODS  # cheap first: most calls are none of these
            or not self._is_statement_line(node)
        ):
            return
        if func.attr == "append" and len(node.args) == 1 and not node.keywords:
            self._check(node, func.value, node.args[0], list_accumulator=True)
        elif func.attr in RECORDING_METHODS and self._recording_method(func) is not None:
            self._check(node, func.value, node.args[0], list_accumulator=False, meter=True)

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
        meter: bool = False,
    ) -> None:
        analysis = self.analysis
        if not self._in_loop(node) or analysis.in_no_grad(node):
            return
        # cheap first: a total or history that starts empty before the loop (most
        # ``x.append(v)`` in loops grow lists the function was handed or returns)
        if not meter and not self._starts_empty(accumulator, node, list_accumulator):
            return
        held: list[ast.expr] = []
        if not (analysis.requires_grad(value, node) or analysis.backpropagated(value, node)):
            held = self._held_roots(value, node) if list_accumulator else []
            if not held:
                return
        verdict = self._only_logged(accumulator.id, node, {node}, 0)
        if verdict is None:
            return
        returned = verdict == "returned"
        if held:
            self.report(node, fix=self._detach_before(node, held, returned=returned))
        else:
            as_number = meter and self._scalar_root(value, node)
            self.report(node, fix=self._fix(value, returned=returned, as_number=as_number))

    def _scalar_root(self, value: ast.expr, at: ast.AST) -> bool:
        """``value`` is the root of a ``.backward()`` without arguments: a scalar."""
        path = access_path(value)
        scope = self.analysis.scope_of(at).node
        return path is not None and any(
            access_path(root) == path
            and is_backward_call(call)
            and not call.args
            and not call.keywords
            and self.analysis.backpropagated(root, at)
            for root, call in self.analysis.backward_roots(scope)
        )

    def _held_roots(self, value: ast.expr, at: ast.AST) -> list[ast.expr]:
        """The backward roots held by ``value`` (``out["loss"]`` of ``out``) whose backward
        call ran before ``at``: detached in place, they free the graph."""
        path = access_path(value)
        if path is None or not self.analysis.backpropagated(value, at, holding=True):
            return []
        scope = self.analysis.scope_of(at).node
        return [
            root
            for root, call in self.analysis.backward_roots(scope)
            if (access_path(root) or ())[: len(path)] == path
            and self.analysis.index(call) < self.analysis.index(at)
            and self.analysis.backpropagated(root, at)
            and not self._reassigned_between(root, call, at)
        ]

    def _reassigned_between(self, root: ast.expr, call: ast.Call, at: ast.AST) -> bool:
        """``out["loss"] = ...`` runs between the backward ``call`` and ``at``."""
        path = access_path(root)
        start, end = self.analysis.index(call), self.analysis.index(at)
        scope = self.analysis.scope_of(at).node
        return any(
            start < self.analysis.index(assign) < end
            and any(access_path(target) == path for target in assign.targets)
            for assign in self.analysis.descendants(scope, ast.Assign)
        )

    def _recording_method(self, func: ast.Attribute) -> ast.FunctionDef | None:
        """``meter.update`` where ``meter`` is an instance of a class of this file whose
        method only stores what it is given (it runs no backward pass)."""
        method = self._instance_method(func)
        if method is None or _calls_backward(method):
            return None
        return method

    def _instance_method(self, func: ast.expr) -> ast.FunctionDef | None:
        """The method of a class of this file that ``obj.method`` calls, ``obj`` being
        bound to ``Class(...)`` (``meter = AverageMeter()``)."""
        if type(func) is not ast.Attribute or type(func.value) is not ast.Name:
            return None
        binding = self.analysis.reaching_binding(func.value, func)
        if binding is None or binding.kind != "assign" or type(binding.value) is not ast.Call:
            return None
        constructor = binding.value.func
        if type(constructor) is not ast.Name:
            return None
        classes = self.analysis.bindings(constructor)
        if len(classes) != 1 or classes[0].kind != "class":
            return None
        cls = classes[0].node
        assert isinstance(cls, ast.ClassDef)
        for statement in cls.body:
            if type(statement) is ast.FunctionDef and statement.name == func.attr:
                return statement
        return None

    def _fix(self, value: ast.expr, *, returned: bool, as_number: bool = False) -> FixPlan:
        """``value.detach()``; ``value.item()`` for a meter, which averages numbers."""
        method = "item" if as_number else "detach"

        def build(editor: Editor) -> list[Edit]:
            receiver = editor.node(value)
            assert isinstance(receiver, cst.BaseExpression)
            if not isinstance(receiver, (cst.Name, cst.Attribute, cst.Call, cst.Subscript)):
                receiver = receiver.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
            detached = cst.Call(cst.Attribute(receiver, cst.Name(method)))
            return [Edit(editor.node(value), detached)]

        safety = FixSafety.UNSAFE if returned else None
        return self.plan(build, f"Accumulate `loss.{method}()`", safety=safety)

    def _detach_before(
        self, node: ast.stmt | ast.Call, roots: list[ast.expr], *, returned: bool
    ) -> FixPlan | None:
        """``out["loss"] = out["loss"].detach()`` before ``history.append(out)``."""
        statement = self.analysis.enclosing_statement(node)
        if statement is None:
            return None
        texts = list(dict.fromkeys(self.analysis.segment(root) for root in roots))
        if any(text is None for text in texts):
            return None

        def build(editor: Editor) -> list[Edit]:
            line = editor.statement(statement)
            detaching = [cst.parse_statement(f"{text} = {text}.detach()\n") for text in texts]
            first = detaching[0].with_changes(leading_lines=line.leading_lines)
            rest = [line.with_changes(leading_lines=())]
            return [Edit(line, cst.FlattenSentinel([first, *detaching[1:], *rest]))]

        safety = FixSafety.UNSAFE if returned else None
        names = ", ".join(f"`{text}`" for text in texts)
        return self.plan(build, f"Detach {names} before keeping it", safety=safety)

    def _leaf_fix(self, factory: ast.Call) -> FixPlan:
        def build(editor: Editor) -> list[Edit]:
            call = editor.node(factory)
            assert isinstance(call, cst.Call)
            return [editor.remove_argument(call, "requires_grad")]

        return self.plan(build, "Create the total without `requires_grad=True`")

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
        return _is_number(binding.value) or self._is_plain_tensor(binding.value)

    def _is_plain_tensor(self, value: ast.expr) -> bool:
        """``torch.tensor(0.0)``, ``torch.zeros(1)``: a new tensor that requires no grad."""
        if type(value) is not ast.Call or self.analysis.call_name(value) not in FACTORIES:
            return False
        return not is_true(argument(value, "requires_grad", None))

    def _only_logged(self, name: str, origin: ast.AST, own: set[ast.AST], depth: int) -> str | None:
        """``"logged"`` / ``"returned"`` when every use of ``name`` in ``origin``'s scope only
        logs it (or returns it); ``None`` when some use may reach the graph.

        Every identifier spelled ``name`` counts: an attribute, a parameter or a function
        of that name is an unknown use."""
        if depth > MAX_DEPTH:
            return None
        scope = self.analysis.scope_of(origin).node
        verdict = "logged"
        for use in self.analysis.spellings_in(scope, name):
            if any(self.analysis.contains(stmt, use) for stmt in own):
                continue
            if self._local_of_inner_function(use, scope, name):
                continue  # ``def summary(self, history)``: another variable of that name
            kind = self._use_kind(use, origin, depth)
            if kind is None:
                return None
            if kind == "returned":
                verdict = kind
        return verdict

    def _local_of_inner_function(self, use: ast.AST, scope: ast.AST, name: str) -> bool:
        """``use`` is a parameter or variable of a function nested in ``scope`` that binds
        ``name`` itself (a different variable; what is passed to it is a use of its own)."""
        if type(use) is not ast.arg and type(use) is not ast.Name:
            return False
        function = self.analysis.enclosing_function(use)
        if function is None or function is scope:
            return False
        return name in self.analysis.scope_of(function.body[0]).bindings

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
                if node is use and self._reads_object_state(parent):
                    node = parent  # ``meter.avg``: followed like the meter itself
                    continue
                if not self._is_method_call(parent):
                    node = parent  # ``out.loss``, ``t.grad_fn``: the value read is followed
                    continue
                return _attribute_kind(parent)
            if isinstance(parent, ast.comprehension) and parent.iter is node:
                return self._iterated_kind(parent, origin, depth)
            if isinstance(parent, _COMPREHENSIONS) and parent.elt is node:
                node = parent
                continue
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
            if isinstance(parent, ast.Expr) and node is not use:
                return "logged"  # ``meter.reset()``: a result nobody keeps
            return None

    def _call_kind(self, call: ast.Call, arg: ast.AST) -> str | None:
        """What a call does with ``arg``: logs it, passes it on (``"pass"``), or unknown."""
        if arg is call.func:
            return None
        func = call.func
        if type(func) is ast.Name and func.id in LOG_FUNCTIONS:
            return "logged"
        qualified = self.analysis.qualified_name(func) or ""
        if qualified in INSPECTING_TORCH:
            return "logged"
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
            method = self._instance_method(func)
            if method is not None and not _calls_backward(method):
                return "pass"  # ``avg = meter.summary(history)``: the result is followed
        return None

    def _is_method_call(self, attribute: ast.Attribute) -> bool:
        call = self.analysis.parent(attribute)
        return type(call) is ast.Call and call.func is attribute

    def _reads_object_state(self, attribute: ast.Attribute) -> bool:
        """``meter.avg`` or ``meter.summary()`` on an instance of a class of this file,
        the method running no backward pass."""
        if type(attribute.value) is not ast.Name:
            return False
        binding = self.analysis.reaching_binding(attribute.value, attribute)
        if binding is None or binding.value is None:
            return False
        if not self._constructs_local_object(binding.value):
            return False
        call = self.analysis.parent(attribute)
        if type(call) is not ast.Call or call.func is not attribute:
            return True
        method = self._instance_method(attribute)
        return method is not None and not _calls_backward(method)

    def _iterated_kind(self, loop: ast.comprehension, origin: ast.AST, depth: int) -> str | None:
        """``(o["loss"].grad_fn for o in history)``: each item is only logged."""
        target = loop.target
        owner = self.analysis.parent(loop)
        if type(target) is not ast.Name or owner is None:
            return None
        verdict = "logged"
        for use in self.analysis.name_nodes_in(owner, target.id):
            if use is target:
                continue
            kind = self._use_kind(use, origin, depth)
            if kind is None:
                return None
            if kind == "returned":
                verdict = kind
        return verdict

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
        if self._is_plain_tensor(value) or self._constructs_local_object(value):
            return "logged"
        return None

    def _constructs_local_object(self, value: ast.expr) -> bool:
        """``AverageMeter()``: an instance of a class of this file (a meter)."""
        if type(value) is not ast.Call or type(value.func) is not ast.Name:
            return False
        classes = self.analysis.bindings(value.func)
        return len(classes) == 1 and classes[0].kind == "class"

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
    if attribute.attr in INSPECTED_ATTRIBUTES:
        return "logged"
    return None


def _unpacked_in(mapping: ast.Dict, node: ast.AST) -> bool:
    return any(key is None and value is node for key, value in zip(mapping.keys, mapping.values))


def _calls_backward(function: ast.AST) -> bool:
    return any(type(node) is ast.Call and is_backward_call(node) for node in ast.walk(function))
