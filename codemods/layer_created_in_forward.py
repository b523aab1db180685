"""GF108 layer-created-in-forward."""

from __future__ import annotations

import ast

import libcst as cst

from gradfix.edits import Editor
from gradfix.rule import Builder, Edit, FixAvailability, FixPlan, FixSafety, Invalid, Rule, Valid
from gradfix.semantic.syntax import argument, is_false
from gradfix.torch_facts import NN_CONSTANT_INIT_LAYERS, NN_PARAMETER_LAYERS

#: what an enclosing test of a lazily built layer asks (``if self.fc is None``,
#: ``if not hasattr(self, "fc")``, ``if key not in self.heads``): the layer is built once
_LAZY_COMPARISONS = (ast.Is, ast.IsNot, ast.In, ast.NotIn)
_LAZY_CALLS = frozenset({"hasattr", "getattr", "isinstance"})


class LayerCreatedInForward(Rule):
    """
    ## What it does
    Finds an `nn` layer that owns parameters (`nn.Linear`, `nn.Conv2d`, `nn.LSTM`,
    `nn.Embedding`, `nn.BatchNorm2d`...) built inside a `forward` method: called on the
    spot (`nn.Linear(16, 4)(x)`), assigned to the module (`self.head = nn.Linear(...)`)
    or to a local name. Moves a `self.<name> = nn.X(...)` statement into `__init__` when
    its arguments mean the same there.

    ## Why is this bad?
    `forward` runs on every call, so every call builds a new layer with fresh random
    weights. The optimizer was given `model.parameters()` before: it never sees these
    weights (built inline, `model.parameters()` does not even list them), and whatever a
    step changes is thrown away at the next call. The loss does not go down, and the
    model's output is random from one call to the next.

    ## Example
    ```python
    class Classifier(nn.Module):
        def __init__(self):
            super().__init__()
            self.hidden = nn.Linear(8, 16)

        def forward(self, x):
            self.head = nn.Linear(16, 3)
            return self.head(torch.relu(self.hidden(x)))
    ```

    ## Use instead
    ```python
    class Classifier(nn.Module):
        def __init__(self):
            super().__init__()
            self.hidden = nn.Linear(8, 16)
            self.head = nn.Linear(16, 3)

        def forward(self, x):
            return self.head(torch.relu(self.hidden(x)))
    ```

    A layer built only once, under a test of whether it exists (`if self.head is None:`,
    `if not hasattr(self, "head"):`, `if key not in self.heads:`), under `torch.no_grad()`,
    or without parameters (`nn.ReLU()(x)`, `nn.MaxPool2d(2)(x)`, `nn.LayerNorm(n,
    elementwise_affine=False)`) is not reported. A layer built inline or bound to a local
    name is reported without a fix: build it in `__init__` as `self.<name> = nn.X(...)`
    and call `self.<name>(x)` in `forward`.

    ## Fix safety
    Unsafe. The statement moves to the end of `__init__` only when each of its arguments
    is a constant, a module-level name `__init__` does not rebind, or a `self.<name>` that
    `__init__` sets once and nothing else changes. Then the layer is the same kind and
    size, but it is built once: `model.parameters()` and `state_dict()` gain its weights,
    an optimizer built from them trains it, and the random numbers drawn change order, so
    the outputs after the first call (and the training results) differ from before.
    """

    code = "GF108"
    name = "layer-created-in-forward"
    synopsis = (
        "Finds a layer with parameters built inside `forward`, fresh weights on every "
        "call that never train, and moves it to `__init__` when its arguments allow."
    )
    message = (
        "Layer with parameters built inside `forward`: every call makes new random "
        "weights that the optimizer never trains; build it once in `__init__`"
    )
    fix_safety = FixSafety.UNSAFE
    fix_availability = FixAvailability.SOMETIMES

    VALID = [
        Valid(
            """
            import torch.nn as nn
            import torch.nn.functional as F

            class Net(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.fc = nn.Linear(8, 4)
                    self.head = None

                def forward(self, x):
                    x = nn.ReLU()(self.fc(x))
                    x = nn.MaxPool1d(2)(x.unsqueeze(0)).squeeze(0)
                    x = nn.LayerNorm(2, elementwise_affine=False)(x)
                    if self.head is None:
                        self.head = nn.Linear(x.shape[-1], 3)
                    return F.log_softmax(self.head(x), dim=-1)
            """
        ),
        Valid(
            """
            import torch
            from torch import nn

            class Lazy(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.heads = nn.ModuleDict()

                def forward(self, x):
                    if not hasattr(self, "proj"):
                        self.proj = nn.Linear(x.shape[-1], 4)
                    key = str(x.shape[-1])
                    if key not in self.heads:
                        self.heads[key] = nn.Linear(x.shape[-1], 4)
                    with torch.no_grad():
                        probe = nn.Linear(4, 4)(self.proj(x))
                    return self.heads[key](x) + probe

            def build(n):
                return nn.Sequential(nn.Linear(n, n), nn.ReLU())
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            import torch.nn as nn

            N_CLASSES = 3

            class Classifier(nn.Module):
                def __init__(self, width):
                    super().__init__()
                    self.width = width
                    self.hidden = nn.Linear(8, width)

                def forward(self, x):
                    x = torch.relu(self.hidden(x))
                    # the output layer
                    self.head = nn.Linear(
                        self.width,  # features
                        N_CLASSES,
                    )
                    return self.head(x)
            """,
            """
            import torch
            import torch.nn as nn

            N_CLASSES = 3

            class Classifier(nn.Module):
                def __init__(self, width):
                    super().__init__()
                    self.width = width
                    self.hidden = nn.Linear(8, width)
                    # the output layer
                    self.head = nn.Linear(
                        self.width,  # features
                        N_CLASSES,
                    )

                def forward(self, x):
                    x = torch.relu(self.hidden(x))
                    return self.head(x)
            """,
        ),
        Invalid(
            """
            import torch as th

            D_IN, H = 20, 10

            class TwoLayer(th.nn.Module):
                def __init__(self, D_IN, H):
                    super().__init__()

                def forward(self, x):
                    h = th.nn.Linear(D_IN, H)(x).clamp(min=0)
                    out = th.nn.Linear(H, 1)(h)
                    return out
            """,
            report_only=True,
        ),
        Invalid(
            """
            from torch import nn

            class Encoder(nn.Module):
                def forward(self, tokens, hidden):
                    embed = nn.Embedding(100, 16)
                    rnn = nn.GRU(16, 16, batch_first=True)
                    self.norm = nn.BatchNorm1d(16)
                    out, hidden = rnn(embed(tokens), hidden)
                    return self.norm(out[:, -1]), hidden
            """,
            report_only=True,
        ),
    ]

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        if node.name != "forward":
            return
        cls = self.analysis.method_class(node)
        if cls is None:
            return
        for call in self.analysis.descendants(node, ast.Call):
            if _spelled_like_a_parameter_layer(call) and self._builds_parameters(call):
                if not self._built_once(call, node):
                    fix = self._move_to_init(call, node, cls)
                    self.report(call, self._message(call), fix=fix)

    def _message(self, call: ast.Call) -> str | None:
        """A layer whose reset sets constants (``nn.LayerNorm``: weight 1, bias 0) gets
        no random weights: it is reset to them on every call (None: the rule's message)."""
        layer = (self.analysis.call_name(call) or "").rpartition(".")[2]
        start = NN_CONSTANT_INIT_LAYERS.get(layer)
        if start is None:
            return None
        return (
            "Layer with parameters built inside `forward`: every call makes a new one whose "
            f"parameters start again at their initial values ({start}) and are never "
            "trained; build it once in `__init__`"
        )

    # -- detection -------------------------------------------------------------------------
    def _builds_parameters(self, call: ast.Call) -> bool:
        head, _, layer = (self.analysis.call_name(call) or "").rpartition(".")
        if head != "torch.nn" or layer not in NN_PARAMETER_LAYERS:
            return False
        flag = NN_PARAMETER_LAYERS[layer]
        return flag is None or not is_false(argument(call, *flag))

    def _built_once(self, call: ast.Call, forward: ast.FunctionDef) -> bool:
        """Under a test of whether the layer exists, in an ``except`` handler, or with
        gradients off (a fixed random projection)."""
        for ancestor in self.analysis.ancestors(call):
            if ancestor is forward:
                break
            if type(ancestor) is ast.ExceptHandler:
                return True
            if type(ancestor) is ast.If and self._runs_once(ancestor):
                return True
        return self.analysis.in_no_grad(call)

    def _runs_once(self, branch: ast.If) -> bool:
        """The branch builds the layer only once: its test asks whether the layer exists,
        or reads a flag of the module that the branch itself turns off
        (``if self.expand: ...; self.expand = False``)."""
        if _asks_existence(branch.test):
            return True
        flags = {
            node.attr
            for node in ast.walk(branch.test)
            if type(node) is ast.Attribute and self.analysis.is_self(node.value, node)
        }
        return any(
            store.attr in flags and self.analysis.is_self(store.value, store)
            for statement in branch.body
            for store in self.analysis.descendants(statement, ast.Attribute)
            if type(store.ctx) is ast.Store
        )

    # -- the fix ---------------------------------------------------------------------------
    def _move_to_init(
        self, call: ast.Call, forward: ast.FunctionDef, cls: ast.ClassDef
    ) -> FixPlan | None:
        statement = self.analysis.parent(call)
        if type(statement) is not ast.Assign or statement not in forward.body:
            return None
        target = statement.targets[0]
        if len(statement.targets) != 1 or not self._self_attribute(target, statement):
            return None
        init = _init_of(cls)
        if init is None or len(forward.body) < 2 or not self.analysis.is_module_class(cls):
            return None
        if type(init.body[-1]) is ast.Return:
            return None
        assert isinstance(target, ast.Attribute)
        if len(self._stores(cls, target.attr)) != 1 or self._read_before(target, forward):
            return None
        if not self._means_the_same_in(call, init, cls):
            return None
        return self.plan(_moved(statement, init.body[-1]), "Build the layer once in `__init__`")

    def _self_attribute(self, expr: ast.expr, at: ast.AST) -> bool:
        return type(expr) is ast.Attribute and self.analysis.is_self(expr.value, at)

    def _stores(self, cls: ast.ClassDef, attr: str) -> list[ast.Attribute]:
        """Every ``self.<attr> = ...`` (or ``del``, ``+=``) in the class's methods."""
        return [
            node
            for node in self.analysis.descendants(cls, ast.Attribute)
            if node.attr == attr
            and type(node.ctx) is not ast.Load
            and self.analysis.is_self(node.value, node)
        ]

    def _read_before(self, target: ast.Attribute, forward: ast.FunctionDef) -> bool:
        """``forward`` reads ``self.<attr>`` before building it (last call's layer)."""
        position = self.analysis.index(target)
        return any(
            node.attr == target.attr
            and self.analysis.index(node) < position
            and self.analysis.is_self(node.value, node)
            for node in self.analysis.descendants(forward, ast.Attribute)
        )

    def _means_the_same_in(self, call: ast.Call, init: ast.FunctionDef, cls: ast.ClassDef) -> bool:
        """Every name of ``call`` is a module-level name ``__init__`` does not rebind, and
        every ``self.<name>`` one that ``__init__`` sets once, at its top level."""
        rebound = {arg.arg for arg in ast.walk(init.args) if type(arg) is ast.arg}
        rebound |= {
            n.id for n in self.analysis.descendants(init, ast.Name) if type(n.ctx) is not ast.Load
        }
        for node in ast.walk(call):
            if type(node) is ast.Attribute and self._self_attribute(node, call):
                if not self._set_once_in(node.attr, init, cls):
                    return False
            elif type(node) is ast.Name and not self.analysis.is_self(node, call):
                if node.id in rebound or not self._module_constant(node):
                    return False
        return True

    def _set_once_in(self, attr: str, init: ast.FunctionDef, cls: ast.ClassDef) -> bool:
        stores = self._stores(cls, attr)
        return len(stores) == 1 and self.analysis.parent(stores[0]) in init.body

    def _module_constant(self, name: ast.Name) -> bool:
        bindings = self.analysis.bindings(name)
        if len(bindings) != 1:
            return False
        return self.analysis.scope_of(bindings[0].node).node is self.analysis.module


def _spelled_like_a_parameter_layer(call: ast.Call) -> bool:
    """The cheap syntactic gate: ``X(...)`` / ``nn.X(...)`` with ``X`` a layer with
    parameters, before any name resolution."""
    func = call.func
    name = func.attr if type(func) is ast.Attribute else func.id if type(func) is ast.Name else ""
    return name in NN_PARAMETER_LAYERS


def _asks_existence(test: ast.expr) -> bool:
    for node in ast.walk(test):
        if type(node) is ast.UnaryOp and type(node.op) is ast.Not:
            if type(node.operand) in (ast.Attribute, ast.Name):
                return True  # ``if not self.built``
        if type(node) is ast.Compare and isinstance(node.ops[0], _LAZY_COMPARISONS):
            return True
        if type(node) is ast.Call and type(node.func) is ast.Name:
            if node.func.id in _LAZY_CALLS:
                return True
    return False


def _init_of(cls: ast.ClassDef) -> ast.FunctionDef | None:
    for statement in cls.body:
        if type(statement) is ast.FunctionDef and statement.name == "__init__":
            return statement
    return None


def _moved(statement: ast.Assign, last_of_init: ast.stmt) -> Builder:
    """The builder: ``statement`` removed from ``forward`` and appended to ``__init__``."""

    def build(editor: Editor) -> list[Edit] | None:
        line = editor.statement(statement)
        if not isinstance(line, cst.SimpleStatementLine) or len(line.body) != 1:
            return None  # ``self.fc = ...; y = ...``: no line of its own
        anchor = editor.statement(last_of_init)
        return [
            Edit(line, cst.RemovalSentinel.REMOVE),
            Edit(anchor, cst.FlattenSentinel([anchor, line])),
        ]

    return build
