"""GF107 plain-module-container."""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator

import libcst as cst

from gradfix.edits import Editor
from gradfix.rule import FixSafety, Invalid, Rule, Valid
from gradfix.semantic.syntax import source_segment

PARAMETER = "torch.nn.Parameter"
#: what wraps a plain container of each element kind: (list wrapper, dict wrapper)
WRAPPERS = {"module": ("ModuleList", "ModuleDict"), "parameter": ("ParameterList", "ParameterDict")}
#: calls that only read a container's elements: the registered container behaves the same
_READERS = frozenset({"len", "enumerate", "zip", "reversed", "iter", "list", "tuple"})
#: methods that read a container, or fill it with a value checked like the elements
_READ_METHODS = frozenset({"keys", "values", "items"})
_FILL_METHODS = frozenset({"append", "insert"})
#: ways to register a module or parameter by hand: the author registers the elements
_REGISTERING = frozenset({"add_module", "register_module", "register_parameter", "setattr"})


class PlainModuleContainer(Rule):
    """
    ## What it does
    Finds sub-modules or parameters kept in a plain Python list or dict on an `nn.Module`:
    `self.layers = [nn.Linear(4, 4) for _ in range(3)]`, `self.weights = {"a":
    nn.Parameter(w)}`, or an empty `[]` / `{}` filled in `__init__` with
    `self.layers.append(nn.Linear(...))` / `self.blocks["k"] = nn.Conv2d(...)`, and wraps it
    in `nn.ModuleList` / `nn.ModuleDict` (modules) or `nn.ParameterList` /
    `nn.ParameterDict` (parameters).

    ## Why is this bad?
    `nn.Module` registers only what is assigned to it directly (a module, a parameter, or
    a container module). Elements of a plain list or dict are invisible to it: they are
    missing from `model.parameters()`, so the optimizer never trains them; `.to(device)`,
    `.double()` and `.train()`/`.eval()` never reach them; `state_dict()` does not save
    them. Their gradients are computed, and then nothing ever uses them.

    ## Example
    ```python
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = [nn.Linear(4, 4) for _ in range(3)]
    ```

    ## Use instead
    ```python
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(3)])
    ```

    Only provable cases are reported: the container is assigned to `self.<name>` in
    `__init__` of an `nn.Module` subclass; every element is built there by an `nn` layer
    constructor, a module class of the file, or `nn.Parameter(...)` (all of one kind);
    dict keys are strings; the class reads the container only by index, iteration,
    `len`/`enumerate`/`zip`, `keys`/`values`/`items`, and fills it only with such
    elements. A list of modules passed in (`self.teacher = [teacher]`, a common way to
    hide a module from `parameters()`), a list handed to `nn.Sequential(*self.layers)`, or
    a class that registers by hand (`add_module`, `register_parameter`, `setattr`) is
    left alone.

    ## Fix safety
    Unsafe. The fix is the change the author wants, but it changes the module's public
    shape: `state_dict()` gains keys (`layers.0.weight`...), so a checkpoint saved before
    the fix no longer loads with `strict=True` (missing keys), and `parameters()` grows,
    so an optimizer built from it now trains these tensors and the training results
    change. `.to(device)` and `.double()` now move and cast them too.
    """

    code = "GF107"
    name = "plain-module-container"
    synopsis = (
        "Finds sub-modules or parameters kept in a plain list or dict on an `nn.Module`, "
        "which `parameters()` misses, and wraps them in `nn.ModuleList` and kin."
    )
    message = (
        "Sub-modules or parameters in a plain list or dict are not registered: "
        "`parameters()` misses them"
    )
    fix_safety = FixSafety.UNSAFE
    fix_changes_training = True

    VALID = [
        Valid(
            """
            import torch
            from torch import nn

            class Student(nn.Module):
                def __init__(self, teacher):
                    super().__init__()
                    self.teacher = [teacher]  # hidden from parameters() on purpose
                    self.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(3)])
                    self.sizes = [4, 8, 16]
            """
        ),
        Valid(
            """
            import torch.nn as nn

            class Net(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.blocks = [nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2)]
                    self.net = nn.Sequential(*self.blocks)
            """
        ),
        Valid(
            """
            import torch.nn as nn

            class Net(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.heads = [nn.Linear(4, 2) for _ in range(2)]
                    for i, head in enumerate(self.heads):
                        self.add_module(f"head{i}", head)
            """
        ),
        Valid(
            """
            import torch
            import torch.nn as nn

            class Config:
                def __init__(self):
                    self.layers = [nn.Linear(4, 4)]

            class Net(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.parts = {1: nn.Linear(4, 4)}
                    self.mixed = [nn.Linear(4, 4), nn.Parameter(torch.zeros(4))]
                    self.cache = []
                    self.cache.append(nn.Linear(4, 4))

                def forward(self, x):
                    self.cache.append(x)
                    return x
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            import torch.nn as nn

            class Net(nn.Module):
                def __init__(self, n):
                    super().__init__()
                    self.layers = [nn.Linear(4, 4) for _ in range(n)]
                    self.weights = {"a": nn.Parameter(torch.zeros(4))}

                def forward(self, x):
                    for layer in self.layers:
                        x = layer(x)
                    return x * self.weights["a"]
            """,
            """
            import torch
            import torch.nn as nn

            class Net(nn.Module):
                def __init__(self, n):
                    super().__init__()
                    self.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(n)])
                    self.weights = nn.ParameterDict({"a": nn.Parameter(torch.zeros(4))})

                def forward(self, x):
                    for layer in self.layers:
                        x = layer(x)
                    return x * self.weights["a"]
            """,
        ),
        Invalid(
            """
            import torch

            class Block(torch.nn.Module):
                pass

            class Net(torch.nn.Module):
                def __init__(self):
                    super().__init__()
                    self.blocks = []
                    for i in range(3):
                        self.blocks.append(Block())
                    self.heads = dict()
                    self.heads["h%d" % 0] = torch.nn.Linear(2, 2)
            """,
            """
            import torch

            class Block(torch.nn.Module):
                pass

            class Net(torch.nn.Module):
                def __init__(self):
                    super().__init__()
                    self.blocks = torch.nn.ModuleList()
                    for i in range(3):
                        self.blocks.append(Block())
                    self.heads = torch.nn.ModuleDict()
                    self.heads["h%d" % 0] = torch.nn.Linear(2, 2)
            """,
        ),
    ]

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        cls = self.analysis.method_class(node)
        if node.name != "__init__" or cls is None or not self._is_module_class(cls, 0):
            return
        candidates = [
            statement
            for statement in self.analysis.descendants(node, ast.Assign)
            if len(statement.targets) == 1 and _container_shape(statement.value) is not None
        ]
        if candidates and not self._registers_by_hand(cls):
            for statement in candidates:
                self._check_assignment(statement, cls)

    def _check_assignment(self, statement: ast.Assign, cls: ast.ClassDef) -> None:
        target, value = statement.targets[0], statement.value
        if type(target) is not ast.Attribute or not self.analysis.is_self(target.value, target):
            return
        shape = _container_shape(value)
        if shape is None:
            return
        uses = list(self._uses(cls, target.attr))
        if any(use is not target and _assigns(use) for use in uses):
            return  # rebound elsewhere: not one container
        kind = self._kind(value, uses)
        if kind is None:
            return
        wrapper = WRAPPERS[kind][shape == "dict"]
        description = f"Wrap in `nn.{wrapper}`"
        self.report(value, fix=self.plan_replace(value, self._wrap(cls, wrapper), description))

    def _kind(self, value: ast.expr, uses: list[ast.Attribute]) -> str | None:
        """'module' / 'parameter' when every element stored is provably one of that kind
        and every use of the container reads it the way the registered one allows."""
        elements = list(_literal_elements(value))
        for use in uses:
            stored = self._stored_by(use)
            if stored is False:
                return None
            if isinstance(stored, ast.expr):
                elements.append(stored)
        if isinstance(value, ast.Dict | ast.Call) and not self._string_keys(value, uses):
            return None
        kinds = {self._element_kind(e) for e in elements}
        if len(kinds) != 1:
            return None
        return kinds.pop()

    def _stored_by(self, use: ast.Attribute) -> ast.expr | None | bool:
        """The element this use stores (``self.x.append(e)``, ``self.x[k] = e``), None for
        a plain read, False for a use the registered container would not allow."""
        parent = self.analysis.parent(use)
        if type(parent) is ast.Assign and use in parent.targets:
            return None
        if type(parent) is ast.Subscript and parent.value is use:
            grand = self.analysis.parent(parent)
            if type(parent.ctx) is ast.Store and type(grand) is ast.Assign:
                return grand.value
            return None if type(parent.ctx) is ast.Load else False
        if type(parent) is ast.Attribute and type(self.analysis.parent(parent)) is ast.Call:
            call = self.analysis.parent(parent)
            assert isinstance(call, ast.Call)
            if call.func is parent and parent.attr in _FILL_METHODS and call.args:
                return call.args[-1]
            return None if call.func is parent and parent.attr in _READ_METHODS else False
        if type(parent) in (ast.For, ast.comprehension) and parent.iter is use:  # type: ignore[union-attr]
            return None
        if type(parent) is ast.Compare and use in parent.comparators:
            return None
        if type(parent) is ast.Call and use in parent.args and type(parent.func) is ast.Name:
            return None if parent.func.id in _READERS else False
        return False

    def _string_keys(self, value: ast.expr, uses: list[ast.Attribute]) -> bool:
        """Every key of a dict container is a string (``ModuleDict`` raises otherwise)."""
        keys: list[ast.expr | None] = list(value.keys) if type(value) is ast.Dict else []
        for use in uses:
            parent = self.analysis.parent(use)
            if type(parent) is ast.Subscript and type(parent.ctx) is ast.Store:
                keys.append(parent.slice)
        return all(key is not None and _is_string(key) for key in keys)

    def _element_kind(self, element: ast.expr) -> str | None:
        if type(element) is not ast.Call:
            return None  # a name may hold a module hidden on purpose: only constructors
        if self.analysis.call_name(element) == PARAMETER:
            return "parameter"
        if self.analysis.is_nn_layer(element, element) or self._constructs_module(element):
            return "module"
        return None

    def _constructs_module(self, call: ast.Call) -> bool:
        if type(call.func) is not ast.Name:
            return False
        bindings = self.analysis.bindings(call.func)
        return (
            len(bindings) == 1
            and type(bindings[0].node) is ast.ClassDef
            and self._is_module_class(bindings[0].node, 0)
        )

    def _is_module_class(self, cls: ast.ClassDef, depth: int) -> bool:
        """``cls`` subclasses ``nn.Module`` (directly or through classes of this file)."""
        for base in cls.bases:
            if self.analysis.is_module_base(base):
                return True
            if type(base) is ast.Name and depth < 8:
                bindings = self.analysis.bindings(base)
                if len(bindings) == 1 and type(bindings[0].node) is ast.ClassDef:
                    if self._is_module_class(bindings[0].node, depth + 1):
                        return True
        return False

    def _uses(self, cls: ast.ClassDef, attr: str) -> Iterator[ast.Attribute]:
        for node in self.analysis.descendants(cls, ast.Attribute):
            if node.attr == attr:
                if self.analysis.is_self(node.value, node):
                    yield node

    def _registers_by_hand(self, cls: ast.ClassDef) -> bool:
        return any(
            _callee_name(node) in _REGISTERING for node in self.analysis.descendants(cls, ast.Call)
        )

    def _wrap(self, cls: ast.ClassDef, wrapper: str) -> Callable[[Editor, cst.CSTNode], cst.Call]:
        """The replacement builder: ``[...]`` -> ``nn.ModuleList([...])``, ``[]`` ->
        ``nn.ModuleList()``, spelled like the class's ``nn.Module`` base."""
        prefix = _nn_prefix(cls, self.context.source)

        def build(editor: Editor, node: cst.CSTNode) -> cst.Call:
            assert isinstance(node, cst.BaseExpression)
            func = cst.parse_expression(f"{prefix}.{wrapper}") if prefix else None
            if func is None:
                func = editor.torch_attr(f"nn.{wrapper}")
            empty = isinstance(node, cst.List | cst.Dict) and not node.elements
            empty = empty or isinstance(node, cst.Call)
            return cst.Call(func, [] if empty else [cst.Arg(node)])

        return build


def _container_shape(value: ast.expr) -> str | None:
    """'list' / 'dict' for a list or dict display, comprehension or empty ``list()``."""
    if type(value) in (ast.List, ast.ListComp):
        return "list"
    if type(value) is ast.Dict:
        return "dict"
    if type(value) is ast.Call and not value.args and not value.keywords:
        if type(value.func) is ast.Name and value.func.id in ("list", "dict"):
            return value.func.id
    return None


def _literal_elements(value: ast.expr) -> Iterator[ast.expr]:
    if type(value) is ast.List:
        yield from value.elts
    elif type(value) is ast.ListComp:
        yield value.elt
    elif type(value) is ast.Dict:
        yield from value.values


def _assigns(use: ast.Attribute) -> bool:
    return type(use.ctx) is ast.Store


def _is_string(key: ast.expr) -> bool:
    """A string constant, an f-string, or ``"fmt" % x``."""
    if type(key) is ast.Constant:
        return type(key.value) is str
    if type(key) is ast.BinOp and type(key.op) is ast.Mod:
        return type(key.left) is ast.Constant and type(key.left.value) is str
    return type(key) is ast.JoinedStr


def _callee_name(call: ast.Call) -> str | None:
    func = call.func
    if type(func) is ast.Attribute:
        return func.attr
    return func.id if type(func) is ast.Name else None


def _nn_prefix(cls: ast.ClassDef, source: str) -> str | None:
    """``nn`` for ``class Net(nn.Module)``, ``torch.nn`` for ``torch.nn.Module``."""
    for base in cls.bases:
        if type(base) is ast.Attribute and base.attr == "Module":
            return source_segment(source, base.value)
    return None
