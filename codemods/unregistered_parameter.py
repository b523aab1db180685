"""GF109 unregistered-parameter."""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator

import libcst as cst

from gradfix.edits import Editor, without_argument
from gradfix.rule import Edit, FixAvailability, FixPlan, FixSafety, Invalid, Rule, Valid
from gradfix.semantic.syntax import argument, is_true
from gradfix.torch_facts import FACTORIES

PARAMETER = "torch.nn.Parameter"
#: calls that take a tensor's training into the author's hands: an optimizer built from it,
#: a list of parameters filled by hand
_HANDING_METHODS = frozenset({"append", "extend", "insert", "add"})
#: a class that registers or lists its parameters itself
_REGISTERING = frozenset(
    {"register_parameter", "register_buffer", "setattr", "parameters", "named_parameters"}
)


#: how a random tensor is drawn: a weight waiting for its training
_RANDOM_FACTORIES = frozenset(
    "torch." + name for name in "randn rand empty normal randn_like rand_like".split()
)
#: moves and casts that keep a tensor what it was
_MOVES = frozenset("to cuda cpu float double half".split())
#: methods that transpose a weight before it is applied
_TRANSPOSES = frozenset("t transpose permute".split())
#: ops that apply a weight to their input
_WEIGHT_OPS = frozenset(
    "torch." + name
    for name in (
        "matmul mm bmm einsum nn.functional.linear nn.functional.bilinear "
        "nn.functional.conv1d nn.functional.conv2d nn.functional.conv3d"
    ).split()
)
_PLAIN_WEIGHT_MESSAGE = (
    "Random tensor stored as a plain module attribute and used as a weight: "
    "`parameters()` misses it, so it never trains (and `state_dict()` and `.to()` leave "
    "it behind); wrap it in `nn.Parameter` (`register_buffer` if it is meant to stay fixed)"
)


class UnregisteredParameter(Rule):
    """
    ## What it does
    Finds a tensor that is meant to be trained (created with `requires_grad=True`,
    marked with `.requires_grad_()` or `self.w.requires_grad = True`) and stored on an
    `nn.Module` in `__init__` as a plain attribute, `self.w = torch.randn(4, 4,
    requires_grad=True)`, instead of an `nn.Parameter`, and wraps it in `nn.Parameter`.

    ## Why is this bad?
    `nn.Module` registers as parameters only the `nn.Parameter`s assigned to it. A plain
    tensor attribute is missing from `model.parameters()` and `state_dict()`: an optimizer
    built from `model.parameters()` never updates it (its gradient is computed, then
    ignored), `model.to(device)` and `model.double()` leave it behind, and a saved
    checkpoint loses it.

    ## Example
    ```python
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.rand(2, 2)
            self.w.requires_grad = True
            self.fc = nn.Linear(2, 2)
    ```

    ## Use instead
    ```python
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.rand(2, 2))
            self.fc = nn.Linear(2, 2)
    ```

    Only tensors the author asked to train are reported. A tensor the file trains by hand
    (its `.grad` read for a manual update, or itself handed to an optimizer or a list of
    parameters: `torch.optim.Adam([model.w])`), a class that registers or lists its
    parameters itself (`register_parameter`, `register_buffer`, `setattr`, its own
    `parameters()`), and an attribute set again elsewhere in the class are left alone. A
    plain tensor without `requires_grad` (a constant, a mask, a buffer) is not reported,
    except a tensor drawn at random (`torch.randn(L, d).to(device)`) that a method of the
    class applies as a weight (`x @ self.keys.t()`, `torch.matmul(attn, self.values)`,
    `F.linear(x, self.w)`): a memory's keys or a layer written by hand, which never
    trains and which `state_dict()` and `.to(device)` leave behind. If it is meant to stay
    fixed (a random projection), `register_buffer` says so and keeps it in the checkpoint.

    ## Fix safety
    Unsafe. The tensor keeps its values and stays a leaf that requires grad, so the
    forward and its gradients are the same; but it is now registered: `parameters()`
    lists it, so an optimizer built from it trains it and the training results change,
    `state_dict()` gains its key (older checkpoints miss it under `strict=True`), and
    `.to(device)` moves it.
    """

    code = "GF109"
    name = "unregistered-parameter"
    synopsis = (
        "Finds a tensor meant to be trained stored on an `nn.Module` as a plain "
        "attribute, which the optimizer misses, and wraps it in `nn.Parameter`."
    )
    message = (
        "Tensor that requires grad stored as a plain module attribute: `parameters()` "
        "misses it and the optimizer never trains it; wrap it in `nn.Parameter`"
    )
    fix_safety = FixSafety.UNSAFE
    fix_changes_training = True
    fix_availability = FixAvailability.ALWAYS

    VALID = [
        Valid(
            """
            import torch
            import torch.nn as nn

            class Net(nn.Module):
                def __init__(self, n):
                    super().__init__()
                    self.w = nn.Parameter(torch.randn(n, n))
                    self.mask = torch.tril(torch.ones(n, n))
                    self.scale = torch.tensor(0.5)
                    self.register_buffer("pos", torch.arange(n).float())

                def forward(self, x):
                    return (x @ (self.w * self.mask)) * self.scale + self.pos

            class Scratch:
                def __init__(self):
                    self.w = torch.randn(3, 3, requires_grad=True)
                    self.b = torch.zeros(3, requires_grad=True)

                def parameters(self):
                    return [self.w, self.b]
            """
        ),
        Valid(
            """
            import torch
            from torch import nn

            class Attack(nn.Module):
                def __init__(self, shape):
                    super().__init__()
                    self.delta = torch.zeros(shape, requires_grad=True)

                def forward(self, x):
                    return x + self.delta

            attack = Attack((2, 3))
            optimizer = torch.optim.Adam([attack.delta], lr=0.01)

            class Manual(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.w = torch.ones(3).requires_grad_()

                def step(self, lr):
                    with torch.no_grad():
                        self.w -= lr * self.w.grad
            """
        ),
        Valid(
            """
            import torch
            import torch.nn as nn
            class Memory(nn.Module):
                def __init__(self, n, d):
                    super().__init__()
                    self.register_buffer("proj", torch.randn(d, d))  # fixed on purpose
                    self.pe = torch.zeros(n, d)  # filled below, never trained
                    self.noise = torch.randn(n, d)  # added, not multiplied
                def forward(self, x):
                    return (x + self.noise) @ self.proj + self.pe
            class Scratch(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.W1 = torch.randn(3, 2)  # trained by hand below
                def forward(self, x):
                    return x @ self.W1
                def backward(self, x, grad, lr=0.1):
                    self.W1 -= lr * x.t() @ grad
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            from torch import nn

            class Net(nn.Module):
                def __init__(self):
                    super(Net, self).__init__()
                    self.w = torch.rand(2, 2)
                    self.w.requires_grad = True
                    self.fc = nn.Linear(2, 2)
                    self.gate = torch.zeros(
                        2,  # one per feature
                        requires_grad=True,
                    )
                    self.bias = torch.full((2,), 0.1).requires_grad_()

                def forward(self, x):
                    return self.fc(x @ self.w) * torch.sigmoid(self.gate) + self.bias
            """,
            """
            import torch
            from torch import nn

            class Net(nn.Module):
                def __init__(self):
                    super(Net, self).__init__()
                    self.w = nn.Parameter(torch.rand(2, 2))
                    self.fc = nn.Linear(2, 2)
                    self.gate = nn.Parameter(torch.zeros(
                        2,  # one per feature
                    ))
                    self.bias = nn.Parameter(torch.full((2,), 0.1))

                def forward(self, x):
                    return self.fc(x @ self.w) * torch.sigmoid(self.gate) + self.bias
            """,
        ),
        Invalid(
            """
            import torch as th

            class Peephole(th.nn.Module):
                def __init__(self, channels, size):
                    super().__init__()
                    self.Wci = th.zeros(1, channels, size, size, requires_grad=True)

                def forward(self, c):
                    return th.sigmoid(c * self.Wci)
            """,
            """
            import torch as th

            class Peephole(th.nn.Module):
                def __init__(self, channels, size):
                    super().__init__()
                    self.Wci = th.nn.Parameter(th.zeros(1, channels, size, size))

                def forward(self, c):
                    return th.sigmoid(c * self.Wci)
            """,
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn
            import torch.nn.functional as F
            class NormalityMemory(nn.Module):
                def __init__(self, L, channel, device="cpu"):
                    super().__init__()
                    self.keys = torch.randn(L, channel).to(device)
                    self.values = torch.randn(L, channel)
                def forward(self, x):
                    attn = F.softmax(x @ self.keys.t(), dim=-1)
                    return torch.matmul(attn, self.values)
            """,
            """
            import torch
            import torch.nn as nn
            import torch.nn.functional as F
            class NormalityMemory(nn.Module):
                def __init__(self, L, channel, device="cpu"):
                    super().__init__()
                    self.keys = nn.Parameter(torch.randn(L, channel).to(device))
                    self.values = nn.Parameter(torch.randn(L, channel))
                def forward(self, x):
                    attn = F.softmax(x @ self.keys.t(), dim=-1)
                    return torch.matmul(attn, self.values)
            """,
        ),
    ]

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        if node.name != "__init__":
            return
        cls = self.analysis.method_class(node)
        if cls is None or not cls.bases or not self.analysis.is_module_class(cls):
            return
        candidates = [
            statement
            for statement in self.analysis.descendants(node, ast.Assign)
            if type(statement.value) is ast.Call and self._self_target(statement, node)
        ]
        if candidates and not self._registers_by_hand(cls):
            for statement in candidates:
                self._check(statement, node, cls)

    def _self_target(self, statement: ast.Assign, init: ast.FunctionDef) -> bool:
        target = statement.targets[0]
        return (
            len(statement.targets) == 1
            and type(target) is ast.Attribute
            and self.analysis.is_self(target.value, statement)
        )

    def _check(self, statement: ast.Assign, init: ast.FunctionDef, cls: ast.ClassDef) -> None:
        target = statement.targets[0]
        assert isinstance(target, ast.Attribute) and isinstance(statement.value, ast.Call)
        marker, message = None, None
        if not self._asks_for_grad(statement.value):
            marker = self._later_marker(target.attr, statement, init)
            if marker is None or self.analysis.call_name(statement.value) not in FACTORIES:
                if not self._random_weight(statement.value, target.attr, cls, init):
                    return
                message = _PLAIN_WEIGHT_MESSAGE
        uses = list(self._uses(cls, target.attr))
        if any(type(use.ctx) is not ast.Load for use in uses if use is not target):
            return  # set again elsewhere: not one tensor
        if self._trained_by_hand(target.attr):
            return
        self.report(statement.value, message, fix=self._wrap(statement, marker))

    def _random_weight(self, value: ast.Call, attr: str, cls: ast.ClassDef, init: ast.AST) -> bool:
        """A tensor drawn at random (``torch.randn(L, d).to(device)``) that a method of
        the class multiplies its input by (``x @ self.keys.t()``, ``F.linear(x,
        self.w)``): a weight, though nothing asks for its gradient."""
        while type(value.func) is ast.Attribute and value.func.attr in _MOVES:
            inner = value.func.value
            if type(inner) is not ast.Call:
                return False
            value = inner
        if self.analysis.call_name(value) not in _RANDOM_FACTORIES:
            return False  # the cheap test first: most assignments build layers
        return any(
            self._used_as_weight(use)
            for use in self._uses(cls, attr)
            if not self.analysis.contains(init, use)
        )

    def _used_as_weight(self, use: ast.Attribute) -> bool:
        node: ast.AST = use
        parent = self.analysis.parent(node)
        # ``self.keys.t()``, ``self.w.T``, ``self.w.transpose(0, 1)``: still the weight
        while type(parent) is ast.Attribute and parent.attr in (*_TRANSPOSES, "T", "mT"):
            node, parent = parent, self.analysis.parent(parent)
            if type(parent) is ast.Call and parent.func is node:
                node, parent = parent, self.analysis.parent(parent)
        if type(parent) is ast.BinOp and type(parent.op) is ast.MatMult:
            return True
        if type(parent) is ast.Call and node in parent.args:
            return (self.analysis.call_name(parent) or "") in _WEIGHT_OPS
        return False

    def _asks_for_grad(self, value: ast.Call) -> bool:
        """A leaf that requires grad, made right here (not an ``nn.Parameter``)."""
        if self.analysis.call_name(value) == PARAMETER:
            return False
        if self.analysis.call_name(value) in FACTORIES:
            return is_true(argument(value, "requires_grad", None))
        func = value.func
        if type(func) is ast.Attribute and func.attr == "requires_grad_":
            flag = argument(value, "requires_grad", 0)
            return (flag is None or is_true(flag)) and type(func.value) is ast.Call
        return False

    @functools.cached_property
    def _spells_requires_grad(self) -> bool:
        return "requires_grad" in self.context.source

    def _later_marker(
        self, attr: str, statement: ast.Assign, init: ast.FunctionDef
    ) -> ast.stmt | None:
        """``self.<attr>.requires_grad = True`` / ``self.<attr>.requires_grad_()``, a
        statement of ``__init__``'s body after ``statement``."""
        if not self._spells_requires_grad:
            return None  # cheap first: most files mark nothing (each mark spells it)
        position = self.analysis.index(statement)
        for later in init.body:
            if self.analysis.index(later) > position and _marks(later, attr, self, later):
                return later
        return None

    def _uses(self, cls: ast.ClassDef, attr: str) -> Iterator[ast.Attribute]:
        for node in self.analysis.descendants(cls, ast.Attribute):
            if node.attr == attr and self.analysis.is_self(node.value, node):
                yield node

    def _registers_by_hand(self, cls: ast.ClassDef) -> bool:
        for node in cls.body:
            if type(node) is ast.FunctionDef and node.name in _REGISTERING:
                return True
        return any(
            type(call.func) in (ast.Attribute, ast.Name)
            and (getattr(call.func, "attr", None) or getattr(call.func, "id", None)) in _REGISTERING
            for call in self.analysis.descendants(cls, ast.Call)
        )

    def _trained_by_hand(self, attr: str) -> bool:
        """Anywhere in the file, ``<x>.<attr>`` is updated by hand (``m.w -= lr *
        m.w.grad``, ``m.w.data.sub_(...)``, ``m.w.grad.zero_()``), put in a list, tuple,
        set or dict, appended to one, or passed to an optimizer."""
        for node in self.analysis.attributes_named(attr):
            if self._updated_by_hand(node) or self._handed_over(node):
                return True
        return False

    def _updated_by_hand(self, node: ast.Attribute) -> bool:
        updated: ast.expr = node
        parent = self.analysis.parent(node)
        if type(parent) is ast.Attribute and parent.attr in ("grad", "data"):
            updated, parent = parent, self.analysis.parent(parent)
        if type(parent) is ast.AugAssign:
            return parent.target is updated
        if type(parent) is ast.Assign and updated is not node:
            return updated in parent.targets  # ``w.grad = None``, ``w.data = ...``
        return type(parent) is ast.Attribute and _inplace_method(parent.attr)

    def _handed_over(self, node: ast.Attribute) -> bool:
        parent = self.analysis.parent(node)
        if type(parent) in (ast.List, ast.Tuple, ast.Set, ast.Dict):
            return True
        if type(parent) is not ast.Call or node not in parent.args:
            return False
        func = parent.func
        if type(func) is ast.Attribute and func.attr in _HANDING_METHODS:
            return True
        return (self.analysis.call_name(parent) or "").startswith("torch.optim.")

    # -- the fix ---------------------------------------------------------------------------
    def _wrap(self, statement: ast.Assign, marker: ast.stmt | None) -> FixPlan:
        value = statement.value
        nn_alias = self.analysis.module_alias("torch.nn")

        def build(editor: Editor) -> list[Edit]:
            node = editor.node(value)
            assert isinstance(node, cst.Call)
            parameter = (
                cst.Attribute(cst.Name(nn_alias), cst.Name("Parameter"))
                if nn_alias is not None
                else editor.torch_attr("nn.Parameter")
            )
            edits = [Edit(node, cst.Call(parameter, [cst.Arg(_not_asking_for_grad(node))]))]
            line = editor.statement(marker) if marker is not None else None
            if isinstance(line, cst.SimpleStatementLine) and _alone(line):
                # no longer needed; one sharing its line or its comment stays (harmless)
                edits.append(Edit(line, cst.RemovalSentinel.REMOVE))
            return edits

        return self.plan(build, "Wrap in `nn.Parameter`", imports=())


def _inplace_method(name: str) -> bool:
    """``sub_``, ``add_``, ``copy_``, ``zero_``...: a method that changes its tensor."""
    return name.endswith("_") and not name.startswith("_") and name != "requires_grad_"


def _marks(statement: ast.stmt, attr: str, rule: UnregisteredParameter, at: ast.AST) -> bool:
    """``statement`` is ``self.<attr>.requires_grad = True`` or ``self.<attr>.requires_grad_()``."""
    if type(statement) is ast.Assign and len(statement.targets) == 1:
        target = statement.targets[0]
        return (
            type(target) is ast.Attribute
            and target.attr == "requires_grad"
            and is_true(statement.value)
            and _self_attribute(target.value, attr, rule, at)
        )
    if type(statement) is ast.Expr and type(statement.value) is ast.Call:
        func = statement.value.func
        flag = argument(statement.value, "requires_grad", 0)
        return (
            type(func) is ast.Attribute
            and func.attr == "requires_grad_"
            and (flag is None or is_true(flag))
            and _self_attribute(func.value, attr, rule, at)
        )
    return False


def _self_attribute(expr: ast.expr, attr: str, rule: UnregisteredParameter, at: ast.AST) -> bool:
    return (
        type(expr) is ast.Attribute and expr.attr == attr and rule.analysis.is_self(expr.value, at)
    )


def _not_asking_for_grad(call: cst.Call) -> cst.BaseExpression:
    """``torch.zeros(2, requires_grad=True)`` -> ``torch.zeros(2)``;
    ``t.requires_grad_()`` -> ``t``: ``nn.Parameter`` asks for the gradient."""
    func = call.func
    if isinstance(func, cst.Attribute) and func.attr.value == "requires_grad_":
        return func.value
    return without_argument(call, "requires_grad")


def _alone(line: cst.SimpleStatementLine) -> bool:
    """One statement on its line, with no comment on it or above it."""
    commented = line.trailing_whitespace.comment is not None
    commented = commented or any(empty.comment is not None for empty in line.leading_lines)
    return len(line.body) == 1 and not commented
