"""Shared static analysis used by every rule: torch names, scopes, leaves, grad mode.

One pass over the module (:class:`_Collector`) records, for every node, its parent and its
pre-order index, and for every scope the names it binds. Questions are answered lazily:

- :meth:`FileAnalysis.qualified_name` resolves ``th.nn.Parameter`` to
  ``"torch.nn.Parameter"`` through the file's imports (``import torch as th``,
  ``from torch import nn``, ``import torch.nn.functional as F``...); a local named
  ``torch`` (a parameter, an assignment) is not torch.
- :meth:`FileAnalysis.leaf_reason` tells why an expression holds a leaf tensor that
  requires grad (``nn.Parameter``, a factory with ``requires_grad=True``,
  ``.requires_grad_()``, ``t.requires_grad = True``, a loop over ``.parameters()``,
  ``self.w`` set to a parameter in ``__init__``, ``layer.weight`` of an ``nn`` layer).
- :meth:`FileAnalysis.in_no_grad` tells whether a node runs with grad mode off
  (``with torch.no_grad():``, ``inference_mode``, ``set_grad_enabled(False)``, a
  ``@torch.no_grad()`` function, or a function only ever called from such places).

The analysis is flow-insensitive inside a scope except for one thing: a name's value at a
use is the binding that textually precedes it (the last one before it). It prefers
silence: what it cannot prove is not a tensor, not a leaf, not in no_grad.
"""

from __future__ import annotations

import ast
import bisect
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import libcst as cst

from gradfix.walk import walk

SCOPE_NODES = (
    cst.Module,
    cst.FunctionDef,
    cst.Lambda,
    cst.ClassDef,
    cst.ListComp,
    cst.SetComp,
    cst.DictComp,
    cst.GeneratorExp,
)

# Canonical spellings of torch names that have several import paths.
_CANONICAL = {
    "torch.nn.parameter.Parameter": "torch.nn.Parameter",
    "torch.nn.modules.module.Module": "torch.nn.Module",
    "torch.autograd.grad_mode.no_grad": "torch.no_grad",
    "torch.autograd.no_grad": "torch.no_grad",
    "torch.autograd.grad_mode.enable_grad": "torch.enable_grad",
    "torch.autograd.grad_mode.inference_mode": "torch.inference_mode",
    "torch.autograd.grad_mode.set_grad_enabled": "torch.set_grad_enabled",
    "torch.functional.F": "torch.nn.functional",
}

#: torch functions that create a new tensor and accept ``requires_grad=``.
FACTORIES = frozenset(
    "torch." + name
    for name in (
        "tensor as_tensor zeros ones empty full rand randn randint arange linspace logspace eye "
        "zeros_like ones_like empty_like full_like rand_like randn_like normal randperm "
        "empty_strided sparse_coo_tensor"
    ).split()
)

#: Tensor methods and torch functions whose result is not a tensor.
NON_TENSOR_METHODS = frozenset(
    "item tolist numpy size dim ndimension numel nelement is_contiguous is_floating_point "
    "is_complex element_size data_ptr stride storage_offset __len__ get_device type "
    "is_leaf requires_grad shape dtype device ndim".split()
)
NON_TENSOR_TORCH = frozenset(
    "torch." + name
    for name in (
        "is_tensor is_storage is_floating_point is_complex numel get_default_dtype "
        "is_grad_enabled is_inference_mode_enabled manual_seed seed initial_seed "
        "set_default_dtype set_grad_enabled no_grad enable_grad inference_mode "
        "device dtype Size finfo iinfo compile jit save load cuda backends "
        "set_printoptions use_deterministic_algorithms equal"
    ).split()
)

#: Attribute names of ``nn`` layers that are parameters.
LAYER_PARAMETERS = frozenset(
    "weight bias weight_ih_l0 weight_hh_l0 bias_ih_l0 bias_hh_l0 in_proj_weight "
    "in_proj_bias".split()
)

#: Calls whose ``with`` block runs with gradients off.
NO_GRAD_CONTEXTS = frozenset({"torch.no_grad", "torch.inference_mode"})


@dataclass
class Binding:
    """One place where a scope binds a name."""

    name: str
    kind: str  # assign | augassign | for | with | param | import | def | class | other
    node: cst.CSTNode  # the statement (or Param, For, WithItem...) that binds
    value: cst.BaseExpression | None  # the bound value, when known
    start: int  # pre-order index of the binding statement
    end: int  # last pre-order index inside it: a use after ``end`` sees this binding
    qualified: str | None = None  # for imports: the dotted module/object name
    unpack_index: int | None = None  # for ``for a, b in it``: position of the name
    annotation: cst.BaseExpression | None = None


@dataclass
class Scope:
    node: cst.CSTNode
    parent: Scope | None
    bindings: dict[str, list[Binding]] = field(default_factory=dict)

    def bind(self, binding: Binding) -> None:
        self.bindings.setdefault(binding.name, []).append(binding)

    @property
    def is_class(self) -> bool:
        return type(self.node) is cst.ClassDef  # exact type: isinstance on ABCs is slow


@dataclass
class LeafReason:
    """Why an expression holds a leaf tensor that requires grad (for messages)."""

    description: str
    binding: Binding | None = None


#: Exact node types (``isinstance`` on LibCST's abstract node classes is slow).
_SCOPE_TYPES = frozenset(SCOPE_NODES)
#: The node types :meth:`_Collector._record` looks at.
_RECORDED_TYPES = frozenset(
    {
        cst.Assign,
        cst.AnnAssign,
        cst.AugAssign,
        cst.For,
        cst.CompFor,
        cst.WithItem,
        cst.NamedExpr,
        cst.Param,
        cst.ExceptHandler,
        cst.Import,
        cst.ImportFrom,
        cst.Call,
        cst.Return,
        cst.Yield,
    }
)


class _Collector(cst.CSTVisitor):
    """One traversal: parents, pre-order indices, scopes and their bindings, call sites."""

    def __init__(self) -> None:
        self.parents: dict[int, cst.CSTNode] = {}
        self.order: dict[int, int] = {}
        self.last: dict[int, int] = {}
        self.scopes: dict[int, Scope] = {}
        self.node_scopes: dict[int, Scope] = {}  # the scope each node is evaluated in
        self.names: dict[str, list[cst.Name]] = {}  # every Name node by spelling, in order
        self.name_orders: dict[str, list[int]] = {}  # their pre-order indices
        self.calls_by_name: dict[str, list[cst.Call]] = {}
        self.subscript_assigns: dict[str, list[tuple[cst.CSTNode, cst.BaseExpression]]] = {}
        self.class_attrs: dict[int, dict[str, list[tuple[cst.BaseExpression, Binding]]]] = {}
        self.returns: dict[int, list[cst.Return]] = {}
        self.generators: set[int] = set()
        self._stack: list[cst.CSTNode] = []
        self._scope_stack: list[Scope] = []
        self._counter = 0
        self._pending: list[tuple[Scope, Binding, cst.CSTNode]] = []

    # -- generic bookkeeping -------------------------------------------------------------
    def on_visit(self, node: cst.CSTNode) -> bool:
        if self._stack:
            self.parents[id(node)] = self._stack[-1]
        self.order[id(node)] = self._counter
        self._counter += 1
        self._stack.append(node)
        if self._scope_stack:
            self.node_scopes[id(node)] = self._scope_stack[-1]
        kind = type(node)
        if kind is cst.Name:
            spelling = node.value  # type: ignore[attr-defined]
            self.names.setdefault(spelling, []).append(node)  # type: ignore[arg-type]
            self.name_orders.setdefault(spelling, []).append(self._counter - 1)
        if kind in _SCOPE_TYPES:
            self._enter_scope(node)
        if kind in _RECORDED_TYPES:
            self._record(node)
        return True

    def on_leave(self, original_node: cst.CSTNode) -> None:
        self.last[id(original_node)] = self._counter - 1
        self._stack.pop()
        if type(original_node) in _SCOPE_TYPES:
            self._scope_stack.pop()

    def _enter_scope(self, node: cst.CSTNode) -> None:
        parent = self._scope_stack[-1] if self._scope_stack else None
        if isinstance(node, (cst.FunctionDef, cst.ClassDef)) and parent is not None:
            kind = "def" if isinstance(node, cst.FunctionDef) else "class"
            self._bind(parent, node.name.value, kind, node, None)
        scope = Scope(node, parent)
        self.scopes[id(node)] = scope
        self._scope_stack.append(scope)

    @property
    def _scope(self) -> Scope:
        return self._scope_stack[-1]

    def _bind(
        self,
        scope: Scope,
        name: str,
        kind: str,
        node: cst.CSTNode,
        value: cst.BaseExpression | None,
        **extra: object,
    ) -> Binding:
        binding = Binding(name, kind, node, value, self.order[id(node)], -1, **extra)  # type: ignore[arg-type]
        scope.bind(binding)
        self._pending.append((scope, binding, node))
        return binding

    def finish(self) -> None:
        for _scope, binding, node in self._pending:
            if isinstance(node, cst.CompFor):
                binding.end = -1  # visible in the whole comprehension, element included
            elif isinstance(node, cst.For):
                binding.end = self.last[id(node.iter)]  # visible in the loop body
            else:
                binding.end = self.last.get(id(node), binding.start)

    # -- what binds names ------------------------------------------------------------------
    def _record(self, node: cst.CSTNode) -> None:
        if isinstance(node, cst.Assign):
            for target in node.targets:
                self._bind_target(target.target, node, node.value, "assign")
                self._record_class_level(target.target, node.value, node)
                if isinstance(target.target, cst.Subscript):
                    base = target.target.value
                    if isinstance(base, cst.Name):
                        entry = (node, node.value)
                        self.subscript_assigns.setdefault(base.value, []).append(entry)
        elif isinstance(node, cst.AnnAssign):
            self._bind_target(
                node.target, node, node.value, "assign", annotation=node.annotation.annotation
            )
            if node.value is not None:
                self._record_class_level(node.target, node.value, node)
        elif isinstance(node, cst.AugAssign):
            self._bind_target(node.target, node, None, "augassign")
        elif isinstance(node, (cst.For, cst.CompFor)):
            self._bind_target(node.target, node, node.iter, "for")
        elif isinstance(node, cst.WithItem) and node.asname is not None:
            self._bind_target(node.asname.name, node, node.item, "with")
        elif isinstance(node, cst.NamedExpr):
            self._bind_target(node.target, node, node.value, "assign")
        elif isinstance(node, cst.Param):
            ann = node.annotation.annotation if node.annotation else None
            self._bind(self._scope, node.name.value, "param", node, None, annotation=ann)
        elif isinstance(node, cst.ExceptHandler) and node.name is not None:
            self._bind_target(node.name.name, node, None, "other")
        elif isinstance(node, (cst.Import, cst.ImportFrom)):
            self._record_import(node)
        elif isinstance(node, cst.Call):
            self._record_call(node)
        elif isinstance(node, cst.Return) and isinstance(self._scope.node, cst.FunctionDef):
            self.returns.setdefault(id(self._scope.node), []).append(node)
        elif isinstance(node, cst.Yield):
            self.generators.add(id(self._scope.node))

    def _bind_target(
        self,
        target: cst.BaseExpression,
        node: cst.CSTNode,
        value: cst.BaseExpression | None,
        kind: str,
        unpack_index: int | None = None,
        annotation: cst.BaseExpression | None = None,
    ) -> None:
        if isinstance(target, cst.Name):
            self._bind(
                self._scope,
                target.value,
                kind,
                node,
                value,
                unpack_index=unpack_index,
                annotation=annotation,
            )
        elif isinstance(target, (cst.Tuple, cst.List)):
            values: Sequence[cst.BaseElement | None] = [None] * len(target.elements)
            if isinstance(value, (cst.Tuple, cst.List)) and len(value.elements) == len(
                target.elements
            ):
                values = value.elements
            for index, element in enumerate(target.elements):
                item = values[index]
                if item is not None:
                    self._bind_target(element.value, node, item.value, kind)
                elif unpack_index is not None:
                    # ``for i, (h, w) in enumerate(shapes)``: what ``h`` holds is unknown
                    self._bind_target(element.value, node, None, kind, unpack_index=index)
                else:
                    self._bind_target(element.value, node, value, kind, unpack_index=index)
        elif isinstance(target, cst.Attribute) and value is not None and kind == "assign":
            self._record_self_attribute(target, value, node)

    def _record_class_level(
        self, target: cst.BaseExpression, value: cst.BaseExpression, node: cst.CSTNode
    ) -> None:
        """``x = None`` / ``x: T = default`` in a class body (a dataclass field, a class
        default) is one more value ``self.x`` may hold."""
        if not self._scope.is_class or not isinstance(target, cst.Name):
            return
        binding = Binding(target.value, "assign", node, value, self.order[id(node)], -1)
        self._pending.append((self._scope, binding, node))
        attrs = self.class_attrs.setdefault(id(self._scope.node), {})
        attrs.setdefault(target.value, []).append((value, binding))

    def _record_self_attribute(
        self, target: cst.Attribute, value: cst.BaseExpression, node: cst.CSTNode
    ) -> None:
        method = self._scope.node
        class_scope = self._scope.parent
        if not isinstance(method, cst.FunctionDef) or class_scope is None:
            return
        if not class_scope.is_class or not method.params.params:
            return
        self_name = method.params.params[0].name.value
        if isinstance(target.value, cst.Name) and target.value.value == self_name:
            binding = Binding(target.attr.value, "assign", node, value, self.order[id(node)], -1)
            self._pending.append((self._scope, binding, node))
            attrs = self.class_attrs.setdefault(id(class_scope.node), {})
            attrs.setdefault(target.attr.value, []).append((value, binding))

    def _record_import(self, node: cst.Import | cst.ImportFrom) -> None:
        if isinstance(node, cst.Import):
            for alias in node.names:
                dotted = _dotted(alias.name)
                if alias.asname is not None:
                    local = _dotted(alias.asname.name)
                    self._bind(self._scope, local, "import", node, None, qualified=dotted)
                else:
                    head = dotted.split(".")[0]
                    self._bind(self._scope, head, "import", node, None, qualified=head)
            return
        if node.relative or node.module is None or isinstance(node.names, cst.ImportStar):
            return
        module = _dotted(node.module)
        for alias in node.names:
            name = _dotted(alias.name)
            local = _dotted(alias.asname.name) if alias.asname else name
            self._bind(self._scope, local, "import", node, None, qualified=f"{module}.{name}")

    def _record_call(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Name):
            self.calls_by_name.setdefault(func.value, []).append(node)
        elif isinstance(func, cst.Attribute):
            self.calls_by_name.setdefault(func.attr.value, []).append(node)
            if func.attr.value == "register_parameter" and len(node.args) >= 2:
                name_arg = node.args[0].value
                attr = name_arg.evaluated_value if isinstance(name_arg, cst.SimpleString) else None
                if (
                    isinstance(attr, str)
                    and attr.isidentifier()
                    and isinstance(func.value, cst.Name)
                ):
                    target = cst.Attribute(func.value, cst.Name(attr))
                    self._record_self_attribute(target, node.args[1].value, node)
        # A function passed by reference (``model.apply(init_fn)``) runs where the call is.
        for arg in node.args:
            ref = arg.value
            name = ref.value if isinstance(ref, cst.Name) else None
            if isinstance(ref, cst.Attribute):
                name = ref.attr.value
            if name is not None:
                self.calls_by_name.setdefault(name, []).append(node)


def _dotted(node: cst.CSTNode) -> str:
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        return f"{_dotted(node.value)}.{node.attr.value}"
    return ""


class FileAnalysis:
    """Facts about one parsed module; see the module docstring."""

    def __init__(self, module: cst.Module) -> None:
        collector = _Collector()
        walk(module, collector)
        collector.finish()
        self.module = module
        self._parents = collector.parents
        self._order = collector.order
        self._last = collector.last
        self._scopes = collector.scopes
        self._calls_by_name = collector.calls_by_name
        self._node_scopes = collector.node_scopes
        self._names = collector.names
        self._name_orders = collector.name_orders
        self._subscript_assigns = collector.subscript_assigns
        self._class_attrs = collector.class_attrs
        self._returns = collector.returns
        self._generators = collector.generators
        self._no_grad_cache: dict[int, bool] = {}
        self._requires_grad_cache: dict[int, list[tuple[cst.CSTNode, bool]]] = {}
        self._requires_grad_all: list[tuple[cst.CSTNode, bool]] | None = None
        self._torch_alias: str | None | bool = False
        self._requires_grad_memo: dict[tuple[int, int, int], bool] = {}
        #: (expr, at) pairs whose ``is_tensor`` is being answered: asking again is a cycle
        self._is_tensor_asked: set[tuple[int, int]] = set()
        self._qualified: dict[int, str | None] = {}  # qualified_name by node (rules ask often)

    # -- tree navigation -------------------------------------------------------------------
    def parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        return self._parents.get(id(node))

    def ancestors(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        current = self.parent(node)
        while current is not None:
            yield current
            current = self.parent(current)

    def index(self, node: cst.CSTNode) -> int:
        """Pre-order position of ``node``: textual order of the source."""
        return self._order[id(node)]

    def end_index(self, node: cst.CSTNode) -> int:
        return self._last[id(node)]

    def contains(self, outer: cst.CSTNode, inner: cst.CSTNode) -> bool:
        return self.index(outer) <= self.index(inner) <= self.end_index(outer)

    def name_nodes_in(self, root: cst.CSTNode, name: str) -> list[cst.Name]:
        """Every ``Name`` node spelled ``name`` under ``root`` (``root`` included), in
        source order; from the index of the one traversal, nothing is walked."""
        orders = self._name_orders.get(name)
        if not orders or id(root) not in self._order:
            return []
        first = bisect.bisect_left(orders, self._order[id(root)])
        return self._names[name][first : bisect.bisect_right(orders, self._last[id(root)])]

    def scope_of(self, node: cst.CSTNode) -> Scope:
        """The scope ``node`` is evaluated in (a scope node's own is its parent's)."""
        known = self._node_scopes.get(id(node))
        if known is not None:
            return known
        for ancestor in self.ancestors(node):
            if id(ancestor) in self._scopes:
                return self._scopes[id(ancestor)]
        return self._scopes[id(self.module)]

    def enclosing_statement(self, node: cst.CSTNode) -> cst.BaseStatement | None:
        for ancestor in [node, *self.ancestors(node)]:
            if isinstance(ancestor, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
                return ancestor
        return None

    def enclosing_function(self, node: cst.CSTNode) -> cst.FunctionDef | None:
        for ancestor in self.ancestors(node):
            if isinstance(ancestor, cst.FunctionDef):
                return ancestor
        return None

    def enclosing_class(self, node: cst.CSTNode) -> cst.ClassDef | None:
        for ancestor in self.ancestors(node):
            if isinstance(ancestor, cst.ClassDef):
                return ancestor
        return None

    def method_class(self, func: cst.FunctionDef) -> cst.ClassDef | None:
        """The class whose body defines ``func``: None for a plain function, also for one
        nested in a method (``enclosing_class`` would name the method's class)."""
        block = self.parent(func)
        owner = self.parent(block) if block is not None else None
        return owner if isinstance(owner, cst.ClassDef) else None

    # -- names -----------------------------------------------------------------------------
    def bindings(self, name: cst.Name) -> list[Binding]:
        """All bindings of ``name`` in the scope Python would look it up in."""
        scope: Scope | None = self.scope_of(name)
        from_inner = False
        while scope is not None:
            if not (scope.is_class and from_inner) and name.value in scope.bindings:
                return scope.bindings[name.value]
            from_inner = from_inner or not scope.is_class
            scope = scope.parent
        return []

    def reaching_binding(self, name: cst.Name, at: cst.CSTNode | None = None) -> Binding | None:
        """The binding of ``name`` that textually precedes ``at`` (default: the name).

        A binding in one branch of an ``if`` does not reach a use in another branch."""
        at = at if at is not None else name
        position = self.index(at)
        candidates = [
            b
            for b in self.bindings(name)
            if b.kind != "augassign" and b.end < position and not self._exclusive(b.node, at)
        ]
        return max(candidates, key=lambda b: b.start) if candidates else None

    def in_exclusive_branches(self, first: cst.CSTNode, second: cst.CSTNode) -> bool:
        """``first`` and ``second`` sit in different branches of one ``if``: never both run."""
        return self._exclusive(first, second)

    def _exclusive(self, binding: cst.CSTNode, use: cst.CSTNode) -> bool:
        """``binding`` and ``use`` sit in different branches of the same ``if``."""
        child = binding
        for ancestor in self.ancestors(binding):
            if isinstance(ancestor, cst.If) and self.contains(ancestor, use):
                branch = ancestor.orelse
                in_orelse = branch is not None and self.contains(branch, child)
                use_in_orelse = branch is not None and self.contains(branch, use)
                use_in_body = self.contains(ancestor.body, use)
                return (in_orelse and use_in_body) or (not in_orelse and use_in_orelse)
            child = ancestor
        return False

    def qualified_name(self, expr: cst.BaseExpression) -> str | None:
        """``th.nn.Parameter`` -> ``"torch.nn.Parameter"`` via imports; ``None`` if not imported."""
        key = id(expr)
        if key not in self._order:  # a node built by a rule: its id may be reused later
            return self._qualify(expr)
        if key not in self._qualified:
            self._qualified[key] = self._qualify(expr)
        return self._qualified[key]

    def _qualify(self, expr: cst.BaseExpression) -> str | None:
        if isinstance(expr, cst.Name):
            bindings = self.bindings(expr)
            imports = [b for b in bindings if b.kind == "import"]
            others = [b for b in bindings if b.kind != "import" and not _is_none_assign(b)]
            if not imports or others:
                return None
            return _CANONICAL.get(imports[-1].qualified or "", imports[-1].qualified)
        if isinstance(expr, cst.Attribute):
            base = self.qualified_name(expr.value)
            if base is None:
                return None
            dotted = f"{base}.{expr.attr.value}"
            return _CANONICAL.get(dotted, dotted)
        return None

    def call_name(self, call: cst.Call) -> str | None:
        return self.qualified_name(call.func)

    def is_torch_name(self, expr: cst.BaseExpression, *names: str) -> bool:
        qualified = self.qualified_name(expr)
        return qualified is not None and qualified in names

    def imports_torch(self) -> bool:
        """The file imports torch somewhere (rules find nothing in files that do not)."""
        return any(
            b.kind == "import" and (b.qualified or "").split(".")[0] == "torch"
            for scope in self._scopes.values()
            for bindings in scope.bindings.values()
            for b in bindings
        )

    def torch_alias(self) -> str | None:
        """The module-level name bound to the ``torch`` module, if any (``torch``, ``th``)."""
        if self._torch_alias is False:
            alias = None
            for name, bindings in self._scopes[id(self.module)].bindings.items():
                if any(b.kind == "import" and b.qualified == "torch" for b in bindings):
                    if all(b.kind == "import" or _is_none_assign(b) for b in bindings):
                        alias = name
                        if name == "torch":
                            break
            self._torch_alias = alias
        return self._torch_alias  # type: ignore[return-value]

    def module_alias(self, qualified: str) -> str | None:
        """The module-level name an import binds to the module ``qualified`` and nothing
        rebinds: ``nn`` for ``from torch import nn``, ``tnn`` for ``import torch.nn as tnn``."""
        for name, bindings in self._scopes[id(self.module)].bindings.items():
            if all(b.kind == "import" and b.qualified == qualified for b in bindings):
                return name
        return None

    def torch_attr(self, dotted: str) -> cst.BaseExpression:
        """An expression for ``torch.<dotted>`` using the file's alias (``th.stack``)."""
        expr: cst.BaseExpression = cst.Name(self.torch_alias() or "torch")
        for part in dotted.split("."):
            expr = cst.Attribute(expr, cst.Name(part))
        return expr

    # -- tensors and leaves ----------------------------------------------------------------
    def leaf_reason(
        self, expr: cst.BaseExpression, at: cst.CSTNode | None = None, _depth: int = 0
    ) -> LeafReason | None:
        """Why ``expr`` (evaluated at ``at``) holds a leaf tensor that requires grad."""
        if _depth > 8:
            return None
        at = at if at is not None else expr
        if isinstance(expr, cst.Name):
            return self._name_leaf_reason(expr, at, _depth)
        if isinstance(expr, cst.Attribute):
            return self._attribute_leaf_reason(expr, at, _depth)
        return self.leaf_value_reason(expr, at, _depth)

    def leaf_value_reason(
        self, value: cst.BaseExpression, at: cst.CSTNode, _depth: int = 0
    ) -> LeafReason | None:
        """Why evaluating ``value`` creates a leaf that requires grad."""
        if _depth > 8:
            return None  # a function that returns a call of itself, a chain of aliases
        if isinstance(value, (cst.Name, cst.Attribute)):
            return self.leaf_reason(value, at, _depth + 1)
        if not isinstance(value, cst.Call):
            return None
        name = self.call_name(value)
        if name == "torch.nn.Parameter":
            flag = _argument(value, "requires_grad", 1)
            if flag is None or not _is_false(flag.value):
                return LeafReason("an nn.Parameter")
            return None
        if name in FACTORIES:
            flag = _argument(value, "requires_grad", None)
            if flag is not None and _is_true(flag.value):
                return LeafReason(f"created with requires_grad=True by {name}()")
            return None
        func = value.func
        if isinstance(func, cst.Attribute) and func.attr.value == "requires_grad_":
            flag = _argument(value, "requires_grad", 0)
            if flag is None or _is_true(flag.value):
                return LeafReason("marked with .requires_grad_()")
        returned = self.returned_values(value, at)
        return self._returned_leaf_reason(_dotted(func), returned, _depth)

    def _returned_leaf_reason(
        self,
        callee: str,
        returned: list[tuple[cst.BaseExpression, cst.CSTNode]] | None,
        depth: int,
    ) -> LeafReason | None:
        """Every value a function of this file returns is a leaf that requires grad."""
        if not returned:
            return None
        reasons = [self.leaf_value_reason(v, ret, depth + 1) for v, ret in returned]
        if not all(reasons):
            return None
        return LeafReason(f"returned by {callee}(), {reasons[0].description}")  # type: ignore[union-attr]

    def _name_leaf_reason(self, name: cst.Name, at: cst.CSTNode, depth: int) -> LeafReason | None:
        binding = self.reaching_binding(name, at)
        if binding is None:
            return None
        reason: LeafReason | None = None
        if binding.kind == "assign" and binding.unpack_index is not None:
            callee = _dotted(binding.value.func) if isinstance(binding.value, cst.Call) else ""
            reason = self._returned_leaf_reason(callee, self._unpacked_call_values(binding), depth)
        elif binding.kind == "assign" and binding.value is not None:
            reason = self.leaf_value_reason(binding.value, binding.node, depth + 1)
        elif binding.kind == "for" and binding.value is not None:
            reason = self._parameter_iteration(binding.value, binding.unpack_index, depth)
        elif binding.kind == "param" and binding.annotation is not None:
            if self.is_torch_name(binding.annotation, "torch.nn.Parameter"):
                reason = LeafReason("annotated nn.Parameter")
        marked = self._requires_grad_marks(name.value, binding, at)
        if marked is True and reason is None:
            reason = LeafReason("marked with requires_grad = True")
        if marked is False:
            return None
        if reason is not None:
            reason.binding = binding
        return reason

    def _requires_grad_marks(self, name: str, binding: Binding, at: cst.CSTNode) -> bool | None:
        """The last ``name.requires_grad = X`` or ``name.requires_grad_(X)`` after ``binding``."""
        scope = self.scope_of(at)
        position = self.index(at)
        last: tuple[int, bool] | None = None
        for node, flag in self._requires_grad_statements(scope):
            start = self.index(node)
            if binding.end < start and self.end_index(node) < position:
                if _target_name(node) != name:
                    continue
                if last is None or start > last[0]:
                    last = (start, flag)
        return None if last is None else last[1]

    def _requires_grad_statements(self, scope: Scope) -> list[tuple[cst.CSTNode, bool]]:
        """Statements ``x.requires_grad = flag`` and ``x.requires_grad_(flag)`` in ``scope``
        (nested scopes included), found from the index of names, without a walk."""
        key = id(scope.node)
        if key not in self._requires_grad_cache:
            start, end = self.index(scope.node), self.end_index(scope.node)
            self._requires_grad_cache[key] = [
                (node, flag)
                for node, flag in self._all_requires_grad_statements()
                if start <= self.index(node) <= end
            ]
        return self._requires_grad_cache[key]

    def _all_requires_grad_statements(self) -> list[tuple[cst.CSTNode, bool]]:
        if self._requires_grad_all is None:
            found: list[tuple[cst.CSTNode, bool]] = []
            for name in self._names.get("requires_grad", []):
                attr, target = self.parent(name), None
                if isinstance(attr, cst.Attribute) and attr.attr is name:
                    target = self.parent(attr)
                assign = self.parent(target) if isinstance(target, cst.AssignTarget) else None
                if isinstance(assign, cst.Assign) and (
                    _is_true(assign.value) or _is_false(assign.value)
                ):
                    found.append((assign, _is_true(assign.value)))
            for name in self._names.get("requires_grad_", []):
                attr = self.parent(name)
                call = None
                if isinstance(attr, cst.Attribute) and attr.attr is name:
                    call = self.parent(attr)
                if isinstance(call, cst.Call) and call.func is attr:
                    flag = _argument(call, "requires_grad", 0)
                    found.append((call, flag is None or _is_true(flag.value)))
            self._requires_grad_all = found
        return self._requires_grad_all

    def _attribute_leaf_reason(
        self, attr: cst.Attribute, at: cst.CSTNode, depth: int
    ) -> LeafReason | None:
        if _is_self(attr.value, self, at):
            return self._self_attribute_leaf_reason(attr, at, depth)
        if attr.attr.value in LAYER_PARAMETERS and self.is_nn_layer(attr.value, at):
            return LeafReason(f"the .{attr.attr.value} parameter of an nn layer")
        return None

    def _self_attribute_leaf_reason(
        self, attr: cst.Attribute, at: cst.CSTNode, depth: int
    ) -> LeafReason | None:
        cls = self.enclosing_class(at)
        if cls is None:
            return None
        assigned = self._class_attrs.get(id(cls), {}).get(attr.attr.value, [])
        if not assigned:
            return None
        reasons = [self.leaf_value_reason(value, b.node, depth + 1) for value, b in assigned]
        if all(reasons):
            return LeafReason(f"self.{attr.attr.value}, {reasons[0].description}")  # type: ignore[union-attr]
        return None

    def is_nn_layer(self, expr: cst.BaseExpression, at: cst.CSTNode, _depth: int = 0) -> bool:
        """``expr`` holds an instance of a ``torch.nn`` layer class (``nn.Linear(...)``)."""
        if _depth > 8:
            return False
        if isinstance(expr, cst.Call):
            name = self.call_name(expr) or ""
            head, _, last = name.rpartition(".")
            return head == "torch.nn" and last[:1].isupper() and last not in _NN_NON_LAYERS
        if isinstance(expr, cst.Name):
            binding = self.reaching_binding(expr, at)
            if binding is not None and binding.kind == "assign" and binding.value is not None:
                return self.is_nn_layer(binding.value, binding.node, _depth + 1)
            return False
        if isinstance(expr, cst.Attribute) and _is_self(expr.value, self, at):
            cls = self.enclosing_class(at)
            if cls is None:
                return False
            assigned = self._class_attrs.get(id(cls), {}).get(expr.attr.value, [])
            return bool(assigned) and all(
                self.is_nn_layer(value, b.node, _depth + 1) for value, b in assigned
            )
        return False

    def is_module(self, expr: cst.BaseExpression, at: cst.CSTNode, _depth: int = 0) -> bool:
        """``expr`` holds an ``nn.Module`` whose call runs layers: an ``nn`` layer, an
        ``nn.Sequential`` / ``ModuleList`` / ``ModuleDict``, an instance of an ``nn.Module``
        subclass of this file (``model = Net()``), or a function parameter that every call
        site in this file passes such a module (``train_epoch(model, ...)``)."""
        if _depth > 8:
            return False
        if self.is_nn_layer(expr, at):
            return True
        if isinstance(expr, cst.Call):
            name = self.call_name(expr) or ""
            if name in _NN_CONTAINERS:
                return True
            return self._is_module_class(expr.func, _depth)
        if isinstance(expr, cst.Name):
            binding = self.reaching_binding(expr, at)
            if binding is None or binding.unpack_index is not None:
                return False
            if binding.kind == "assign" and binding.value is not None:
                return self.is_module(binding.value, binding.node, _depth + 1)
            if binding.kind == "param" and isinstance(binding.node, cst.Param):
                passed = self.passed_arguments(binding.node)
                return bool(passed) and all(
                    self.is_module(arg, site, _depth + 1) for arg, site in passed
                )
            return False
        values = self.self_attribute_values(expr, at) if isinstance(expr, cst.Attribute) else []
        return bool(values) and all(self.is_module(v, b.node, _depth + 1) for v, b in values)

    def _is_module_class(self, func: cst.BaseExpression, depth: int) -> bool:
        """``func`` names a class of this file that subclasses ``nn.Module`` (directly or
        through other classes of this file)."""
        if not isinstance(func, cst.Name) or depth > 8:
            return False
        bindings = self.bindings(func)
        if len(bindings) != 1 or not isinstance(bindings[0].node, cst.ClassDef):
            return False
        return any(
            self._is_module_base(base.value) or self._is_module_class(base.value, depth + 1)
            for base in bindings[0].node.bases
        )

    def _parameter_iteration(
        self, iterable: cst.BaseExpression, unpack_index: int | None, depth: int
    ) -> LeafReason | None:
        kind = self.parameter_iterable(iterable, depth)
        if kind == "parameters" and unpack_index is None:
            return LeafReason("a parameter from .parameters()")
        if kind == "named_parameters" and unpack_index == 1:
            return LeafReason("a parameter from .named_parameters()")
        return None

    def parameter_iterable(self, expr: cst.BaseExpression, depth: int = 0) -> str | None:
        """'parameters' / 'named_parameters' when iterating ``expr`` yields parameters."""
        if depth > 8:
            return None
        if isinstance(expr, cst.Call):
            func = expr.func
            if isinstance(func, cst.Attribute) and func.attr.value in (
                "parameters",
                "named_parameters",
            ):
                return func.attr.value
            if (
                isinstance(func, cst.Name)
                and func.value in ("list", "tuple", "filter")
                and expr.args
            ):
                return self.parameter_iterable(expr.args[-1].value, depth + 1)
        if isinstance(expr, cst.Subscript) and _subscript_key(expr) == "params":
            # ``for p in group["params"]`` with ``group`` from ``optimizer.param_groups``
            base = expr.value
            if isinstance(base, cst.Name):
                binding = self.reaching_binding(base)
                if binding and binding.kind == "for" and isinstance(binding.value, cst.Attribute):
                    if binding.value.attr.value == "param_groups":
                        return "parameters"
        if isinstance(expr, cst.Name):
            binding = self.reaching_binding(expr)
            if binding is not None and binding.kind == "assign" and binding.value is not None:
                return self.parameter_iterable(binding.value, depth + 1)
        return None

    def requires_grad(
        self, expr: cst.BaseExpression, at: cst.CSTNode | None = None, _depth: int = 0
    ) -> bool:
        """``expr`` evaluates to a tensor that requires grad (a leaf or a result of one).

        Follows names to the binding that reaches ``at``, ``self.`` attributes, indexing,
        arithmetic, torch functions, tensor methods, calls of ``nn`` layers, and index
        assignments (``buf[0] = w[0]`` makes ``buf`` require grad).
        """
        if _depth > 12:
            return False
        at = at if at is not None else expr
        # The answer is a function of (expr, at, depth): memoised, call sites that pass
        # arguments to functions that pass them on no longer multiply the work (a file of
        # transformers took minutes).
        key = (id(expr), id(at), _depth)
        if id(expr) not in self._order or id(at) not in self._order:
            return self._requires_grad(expr, at, _depth)  # nodes built by a rule
        if key not in self._requires_grad_memo:
            self._requires_grad_memo[key] = self._requires_grad(expr, at, _depth)
        return self._requires_grad_memo[key]

    def _requires_grad(self, expr: cst.BaseExpression, at: cst.CSTNode, _depth: int) -> bool:
        if self.leaf_reason(expr, at, _depth) is not None:
            return True
        recurse = self.requires_grad
        if isinstance(expr, cst.Name):
            return self._name_requires_grad(expr, at, _depth)
        if isinstance(expr, cst.Attribute):
            if expr.attr.value in VIEW_ATTRIBUTES:
                return recurse(expr.value, at, _depth + 1)
            return False
        if isinstance(expr, cst.Subscript):
            return recurse(expr.value, at, _depth + 1)
        if isinstance(expr, cst.BinaryOperation):
            return recurse(expr.left, at, _depth + 1) or recurse(expr.right, at, _depth + 1)
        if isinstance(expr, cst.UnaryOperation):
            return recurse(expr.expression, at, _depth + 1)
        if isinstance(expr, cst.IfExp):
            return recurse(expr.body, at, _depth + 1) or recurse(expr.orelse, at, _depth + 1)
        if isinstance(expr, (cst.Tuple, cst.List)):
            return any(recurse(e.value, at, _depth + 1) for e in expr.elements)
        if isinstance(expr, cst.Call):
            return self._call_requires_grad(expr, at, _depth)
        return False

    def _name_requires_grad(self, name: cst.Name, at: cst.CSTNode, depth: int) -> bool:
        binding = self.reaching_binding(name, at)
        if binding is None:
            return False
        if binding.kind == "for" and binding.value is not None:
            if self._parameter_iteration(binding.value, binding.unpack_index, depth):
                return True
            source = _iterated_source(binding.value, binding.unpack_index)
            if (
                source is not None
                and self.is_tensor(source, binding.node)
                and self.requires_grad(source, binding.node, depth + 1)
            ):
                return True  # ``for row in x``, ``for a, b in zip(x[:-1], x[1:])`` on a tensor
        if binding.kind == "assign" and binding.value is not None and binding.unpack_index is None:
            if self.requires_grad(binding.value, binding.node, depth + 1):
                return True
        unpacked = self._unpacked_call_values(binding) or []
        if any(self.requires_grad(v, ret, depth + 1) for v, ret in unpacked):
            return True
        if binding.kind == "param" and isinstance(binding.node, cst.Param):
            if self._is_forward_input(binding.node) or self._argument_requires_grad(
                binding.node, depth
            ):
                return True
        # ``buf[i] = value`` after the binding makes ``buf`` part of the graph.
        for stmt, value in self._index_assignments(name.value, binding, at):
            if self.requires_grad(value, stmt, depth + 1):
                return True
        return False

    def _is_forward_input(self, param: cst.Param) -> bool:
        """A tensor argument of ``forward`` of an ``nn.Module`` subclass: an activation."""
        func = next((a for a in self.ancestors(param) if isinstance(a, cst.FunctionDef)), None)
        if func is None or func.name.value != "forward" or param is func.params.params[0]:
            return False
        if param not in func.params.params or param.default is not None:
            return False  # *args, keyword-only, defaults: configuration more often than data
        cls = self.method_class(func)
        if cls is None or not any(self._is_module_base(base.value) for base in cls.bases):
            return False
        annotation = param.annotation.annotation if param.annotation else None
        return annotation is None or self.is_torch_name(annotation, "torch.Tensor")

    def _is_module_base(self, base: cst.BaseExpression) -> bool:
        name = self.qualified_name(base) or ""
        return name.startswith("torch.nn.") and name.rpartition(".")[2][:1].isupper()

    def _argument_requires_grad(self, param: cst.Param, depth: int) -> bool:
        """Some call site of the function in this file passes a tensor that requires grad."""
        return any(
            self.requires_grad(arg, site, depth + 1) for arg, site in self.passed_arguments(param)
        )

    def passed_arguments(self, param: cst.Param) -> list[tuple[cst.BaseExpression, cst.Call]]:
        """What the call sites of the function in this file pass for ``param``."""
        func = next((a for a in self.ancestors(param) if isinstance(a, cst.FunctionDef)), None)
        if func is None or param not in func.params.params:
            return []
        position = list(func.params.params).index(param)
        is_method = self.method_class(func) is not None and not any(
            isinstance(d.decorator, cst.Name) and d.decorator.value == "staticmethod"
            for d in func.decorators
        )
        passed: list[tuple[cst.BaseExpression, cst.Call]] = []
        for site in self._calls_by_name.get(func.name.value, []):
            callee = site.func
            if is_method and isinstance(callee, cst.Attribute):
                index = position - 1
            elif not is_method and isinstance(callee, cst.Name):
                index = position
            else:
                continue
            callee_name = callee.attr.value if isinstance(callee, cst.Attribute) else callee.value
            if callee_name != func.name.value:
                continue
            arg = _argument(site, param.name.value, index if index >= 0 else None)
            if arg is not None:
                passed.append((arg.value, site))
        return passed

    def element_shape(
        self, expr: cst.BaseExpression, at: cst.CSTNode | None = None, _depth: int = 0
    ) -> str | None:
        """'scalar' for a 0-d tensor, 'piece' for a 1-element slice (``w[0:1] * 2``),
        'number' for a Python number, None when unknown. Follows names and elementwise ops."""
        if _depth > 8:
            return None
        at = at if at is not None else expr
        shape = self.element_shape
        if isinstance(expr, (cst.Integer, cst.Float)):
            return "number"
        if isinstance(expr, cst.UnaryOperation):
            return shape(expr.expression, at, _depth + 1)
        if isinstance(expr, cst.Subscript):
            if any(isinstance(s.slice, cst.Slice) for s in expr.slice):
                return "piece"
            indices = [s.slice.value for s in expr.slice if isinstance(s.slice, cst.Index)]
            if indices and all(isinstance(i, (cst.Integer, cst.Name)) for i in indices):
                return "scalar"
            return None
        if isinstance(expr, cst.BinaryOperation):
            kinds = {shape(expr.left, at, _depth + 1), shape(expr.right, at, _depth + 1)}
            kinds.discard("number")
            if kinds <= {"scalar"}:
                return "scalar" if kinds else "number"
            return "piece" if kinds == {"piece"} or kinds == {"piece", "scalar"} else None
        if isinstance(expr, cst.Name):
            binding = self.reaching_binding(expr, at)
            if binding and binding.kind == "assign" and binding.value is not None:
                if binding.unpack_index is None:
                    return shape(binding.value, binding.node, _depth + 1)
            return None
        if isinstance(expr, cst.Call):
            return self._call_shape(expr, at, _depth)
        return None

    def _call_shape(self, call: cst.Call, at: cst.CSTNode, depth: int) -> str | None:
        func = call.func
        name = self.call_name(call)
        keywords = {a.keyword.value for a in call.args if a.keyword is not None}
        if name is None and isinstance(func, cst.Attribute):
            method = func.attr.value
            if method in _REDUCTIONS and not call.args:
                return "scalar"
            if method in _ELEMENTWISE:
                return self.element_shape(func.value, at, depth + 1)
            return None
        if name is None or not call.args:
            return None
        short = name.rpartition(".")[2]
        is_loss = name.startswith("torch.nn.functional.") and short.endswith("_loss")
        reduces_all = (short in _REDUCTIONS and len(call.args) == 1) or is_loss
        if reduces_all and not ({"reduction", "dim"} & keywords):
            return "scalar"
        if short in _ELEMENTWISE:
            return self.element_shape(call.args[0].value, at, depth + 1)
        return None

    def _index_assignments(
        self, name: str, binding: Binding, at: cst.CSTNode
    ) -> list[tuple[cst.CSTNode, cst.BaseExpression]]:
        position = self.index(at)
        return [
            (stmt, value)
            for stmt, value in self._subscript_assigns.get(name, [])
            if binding.end < self.index(stmt) and self.end_index(stmt) < position
        ]

    def _call_requires_grad(self, call: cst.Call, at: cst.CSTNode, depth: int) -> bool:
        func = call.func
        args = [a.value for a in call.args]
        if self.is_module(func, at):
            return True  # calling a layer or model: ``self.fc(x)``, ``model(x)``
        returned = self.returned_values(call, at)
        if returned is not None:
            return any(self.requires_grad(v, ret, depth + 1) for v, ret in returned)
        if isinstance(func, cst.Attribute) and self.qualified_name(func) is None:
            method = func.attr.value
            if method in _GRAD_CUTTING_METHODS or method in NON_TENSOR_METHODS:
                return False
            if self.requires_grad(func.value, at, depth + 1):
                return True
            return method in _TENSOR_METHODS and any(
                self.requires_grad(a, at, depth + 1) for a in args
            )
        name = self.call_name(call)
        if name is not None:
            if not name.startswith("torch.") or name in NON_TENSOR_TORCH or name in FACTORIES:
                return False
            if name.startswith("torch.nn.") and name.rpartition(".")[2][:1].isupper():
                return False  # constructing a layer
            return any(self.requires_grad(a, at, depth + 1) for a in args)
        return False

    # -- what backward keeps -----------------------------------------------------------------
    def tensor_op(
        self, expr: cst.BaseExpression, at: cst.CSTNode | None = None, _depth: int = 0
    ) -> tuple[str, list[cst.BaseExpression]] | None:
        """The torch op ``expr`` applies and its operands, or None.

        ``a / b`` -> ``("div", [a, b])``; ``torch.log(x)`` and ``x.log()`` -> ``("log", [x])``;
        list/tuple arguments are flattened (``torch.stack([a, b])`` -> ``[a, b]``). A method
        counts only on a receiver shown to be a tensor; user functions are None.
        """
        at = at if at is not None else expr
        if isinstance(expr, cst.BinaryOperation):
            name = _BINARY_OPS.get(type(expr.operator))
            return (name, [expr.left, expr.right]) if name else None
        if isinstance(expr, cst.UnaryOperation):
            name = _UNARY_OPS.get(type(expr.operator))
            return (name, [expr.expression]) if name else None
        if not isinstance(expr, cst.Call):
            return None
        operands = _flatten_operands(expr.args)
        qualified = self.call_name(expr)
        if qualified is not None:
            for namespace in _OP_NAMESPACES:
                short = qualified[len(namespace) :]
                if qualified.startswith(namespace) and "." not in short:
                    return short, operands
            return None
        func = expr.func
        # the receiver's depth goes on from the caller's: ``self.m = self.m.to(d)`` asks
        # whether ``self.m`` is a tensor while answering the same question
        if isinstance(func, cst.Attribute) and self.is_tensor(func.value, at, _depth + 1):
            return func.attr.value, [func.value, *operands]
        return None

    def saved_operands(
        self, expr: cst.BaseExpression, at: cst.CSTNode | None = None
    ) -> list[cst.BaseExpression] | None:
        """The operands of ``expr`` that autograd saves for backward (see ``SAVES_*``),
        assuming the op is recorded (grad mode on, some operand requires grad).

        ``p[0] / p[1]`` -> both; ``p[0] / 2`` -> ``[2]``; ``p[0] + p[1]`` -> ``[]``. None when
        ``expr`` is not an op of the tables: callers must then assume nothing.
        """
        op = self.tensor_op(expr, at)
        if op is None:
            return None
        name, operands = op
        if name in SAVES_INPUTS:
            return operands
        if name in SAVES_OTHER_OPERANDS:
            grads = [self.requires_grad(o, at) for o in operands]
            return [o for i, o in enumerate(operands) if any(grads[:i] + grads[i + 1 :])]
        if name in SAVES_DIVISOR and len(operands) >= 2:
            dividend, divisor = operands[0], operands[1]
            return [dividend, divisor] if self.requires_grad(divisor, at) else [divisor]
        if name in SAVES_OUTPUT or name in SAVES_NOTHING or name in VIEW_OPS:
            return []
        return None

    def saves_output(self, expr: cst.BaseExpression, at: cst.CSTNode | None = None) -> bool:
        """``expr`` is an op that saves its result (``torch.sigmoid(x)``, ``h.exp()``...)."""
        op = self.tensor_op(expr, at)
        return op is not None and op[0] in SAVES_OUTPUT

    def is_tensor(
        self, expr: cst.BaseExpression, at: cst.CSTNode | None = None, _depth: int = 0
    ) -> bool:
        """``expr`` provably evaluates to one ``torch.Tensor`` (False when unsure).

        Follows names to their reaching binding and ``self.`` attributes to ``__init__``;
        knows torch factories and the ops of the ``SAVES_*`` tables, indexing, arithmetic,
        calls of ``nn`` layers. A list of tensors, a dict, a NumPy array are not tensors.
        """
        if _depth > 12:
            return False
        at = at if at is not None else expr
        key = (id(expr), id(at))
        if key in self._is_tensor_asked:
            return False  # a value defined through itself (``self.m = self.m.to(d)``)
        self._is_tensor_asked.add(key)
        try:
            return self._is_tensor(expr, at, _depth)
        finally:
            self._is_tensor_asked.discard(key)

    def _is_tensor(self, expr: cst.BaseExpression, at: cst.CSTNode, _depth: int) -> bool:
        if self.leaf_reason(expr, at, _depth) is not None:
            return True
        if isinstance(expr, cst.Name):
            binding = self.reaching_binding(expr, at)
            if binding is None:
                return False
            if binding.unpack_index is not None:
                unpacked = self._unpacked_call_values(binding)
                return bool(unpacked) and all(
                    self.is_tensor(v, ret, _depth + 1) for v, ret in unpacked or []
                )
            if binding.kind == "param" and binding.annotation is not None:
                return self.is_torch_name(binding.annotation, "torch.Tensor")
            if binding.kind == "param" and isinstance(binding.node, cst.Param):
                passed = self.passed_arguments(binding.node)
                return bool(passed) and all(
                    self.is_tensor(arg, site, _depth + 1) for arg, site in passed
                )
            value = binding.value
            return (
                binding.kind == "assign"
                and value is not None
                and (self.is_tensor(value, binding.node, _depth + 1))
            )
        if isinstance(expr, cst.Attribute):
            if expr.attr.value in VIEW_ATTRIBUTES or expr.attr.value == "data":
                return self.is_tensor(expr.value, at, _depth + 1)
            return self._self_attribute_is_tensor(expr, at, _depth)
        if isinstance(expr, cst.Subscript):
            return self.is_tensor(expr.value, at, _depth + 1)
        if isinstance(expr, cst.BinaryOperation):
            if type(expr.operator) not in _BINARY_OPS:
                return False
            left, right = expr.left, expr.right
            return self.is_tensor(left, at, _depth + 1) or self.is_tensor(right, at, _depth + 1)
        if isinstance(expr, cst.UnaryOperation):
            return type(expr.operator) in _UNARY_OPS and self.is_tensor(
                expr.expression, at, _depth + 1
            )
        if isinstance(expr, cst.Call):
            if self.call_name(expr) in FACTORIES or self.is_module(expr.func, at):
                return True
            op = self.tensor_op(expr, at, _depth)
            if op is not None:
                return op[0] in TENSOR_OPS
            returned = self.returned_values(expr, at)
            return bool(returned) and all(
                self.is_tensor(v, ret, _depth + 1) for v, ret in returned or []
            )
        return False

    def _self_attribute_is_tensor(self, attr: cst.Attribute, at: cst.CSTNode, depth: int) -> bool:
        values = self.self_attribute_values(attr, at)
        return bool(values) and all(self.is_tensor(v, b.node, depth + 1) for v, b in values)

    def self_attribute_values(
        self, attr: cst.Attribute, at: cst.CSTNode
    ) -> list[tuple[cst.BaseExpression, Binding]]:
        """The values ``self.<attr>`` is assigned anywhere in the class of the method
        enclosing ``at`` (``[]`` when ``attr`` is not an attribute of ``self``)."""
        if not _is_self(attr.value, self, at):
            return []
        cls = self.enclosing_class(at)
        assigned = self._class_attrs.get(id(cls), {}) if cls is not None else {}
        return list(assigned.get(attr.attr.value, []))

    # -- values flowing through functions and lists of this file ----------------------------
    def local_function(self, func: cst.BaseExpression, at: cst.CSTNode) -> cst.FunctionDef | None:
        """The function of this file that calling ``func`` runs: a ``def`` that is the only
        binding of its name (``make_weights()``), or a method of the enclosing class called
        on ``self`` (``self.build()``). Generators and ``async def`` are not followed."""
        found: cst.CSTNode | None = None
        if isinstance(func, cst.Name):
            bindings = self.bindings(func)
            if len(bindings) == 1 and bindings[0].kind == "def":
                found = bindings[0].node
        elif isinstance(func, cst.Attribute) and _is_self(func.value, self, at):
            cls = self.enclosing_class(at)
            scope = self._scopes.get(id(cls)) if cls is not None else None
            methods = scope.bindings.get(func.attr.value, []) if scope is not None else []
            if len(methods) == 1 and methods[0].kind == "def":
                found = methods[0].node
        if not isinstance(found, cst.FunctionDef) or found.asynchronous is not None:
            return None
        return None if id(found) in self._generators else found

    def returned_values(
        self, call: cst.Call, at: cst.CSTNode, unpack_index: int | None = None
    ) -> list[tuple[cst.BaseExpression, cst.CSTNode]] | None:
        """What a call of a function of this file returns: ``(value, return statement)`` per
        ``return``; with ``unpack_index``, the element at that position of each returned
        tuple (``w, b = init()``). None when the callee or an element is unknown, or some
        path returns nothing."""
        func = self.local_function(call.func, at)
        returns = self._returns.get(id(func), []) if func is not None else []
        values: list[tuple[cst.BaseExpression, cst.CSTNode]] = []
        for ret in returns:
            value = ret.value
            if value is None:
                return None
            if unpack_index is not None:
                if not isinstance(value, (cst.Tuple, cst.List)):
                    return None
                if len(value.elements) <= unpack_index:
                    return None
                element = value.elements[unpack_index]
                if isinstance(element, cst.StarredElement):
                    return None
                value = element.value
            values.append((value, ret))
        return values or None

    def _unpacked_call_values(
        self, binding: Binding
    ) -> list[tuple[cst.BaseExpression, cst.CSTNode]] | None:
        """For ``a, b = f()`` with ``f`` of this file: what ``f`` returns at the name's
        position."""
        if binding.unpack_index is None or not isinstance(binding.value, cst.Call):
            return None
        return self.returned_values(binding.value, binding.node, binding.unpack_index)

    def list_elements(
        self, name: cst.Name, at: cst.CSTNode
    ) -> tuple[list[tuple[cst.BaseExpression, cst.CSTNode]], bool] | None:
        """The elements of a list built step by step: ``xs = []`` (or a list literal) then
        ``xs.append(e)``, ``xs.extend([e, ...])``, ``xs += [e, ...]`` before ``at``.

        Returns ``(element, where it is added)`` pairs and whether the list is certainly
        non-empty (an element in the literal, or an addition that always runs: not inside a
        loop, ``if``, ``while`` or ``try``, except a ``for`` over ``range(N)`` or a literal
        with elements). None when the list is used in any other way
        between its binding and ``at`` (passed to a call, stored, modified otherwise).
        """
        binding = self.reaching_binding(name, at)
        if binding is None or binding.kind != "assign" or binding.unpack_index is not None:
            return None
        if not isinstance(binding.value, cst.List):
            return None
        if any(isinstance(e, cst.StarredElement) for e in binding.value.elements):
            return None
        elements = [(e.value, binding.node) for e in binding.value.elements]
        certain = bool(elements)
        scope_node = self.scope_of(binding.node).node
        for use in self.name_nodes_in(scope_node, name.value):
            position = self.index(use)
            if not binding.end < position < self.index(at) or use is name:
                continue
            added = self._list_addition(use)
            if added is None:
                return None
            elements.extend((value, use) for value in added)
            certain = certain or (bool(added) and self._runs_once(use, binding.node))
        return elements, certain

    def _list_addition(self, use: cst.Name) -> list[cst.BaseExpression] | None:
        """The values one use of a list name adds to it (``[]`` for a plain read such as
        ``len(xs)``), or None when the use may change the list in unknown ways."""
        parent = self.parent(use)
        if isinstance(parent, cst.AugAssign) and isinstance(parent.operator, cst.AddAssign):
            return _literal_items(parent.value)
        if isinstance(parent, cst.Attribute) and parent.value is use:
            call = self.parent(parent)
            if not isinstance(call, cst.Call) or call.func is not parent:
                return None
            method = parent.attr.value
            if method == "append" and len(call.args) == 1 and not call.args[0].star:
                return [call.args[0].value]
            if method == "extend" and len(call.args) == 1:
                return _literal_items(call.args[0].value)
            return [] if method in ("index", "count", "copy") else None
        if isinstance(parent, cst.Arg):
            call = self.parent(parent)
            is_len = isinstance(call, cst.Call) and isinstance(call.func, cst.Name)
            return [] if is_len and call.func.value == "len" else None  # type: ignore[union-attr]
        if isinstance(parent, cst.For) and parent.iter is use:
            return []
        return None

    def _runs_once(self, node: cst.CSTNode, binding: cst.CSTNode) -> bool:
        """``node`` runs at least once whenever ``binding`` ran (same block or a ``for``
        over a non-empty literal range between them)."""
        for ancestor in self.ancestors(node):
            if self.contains(ancestor, binding):
                return True
            if isinstance(ancestor, (cst.If, cst.While, cst.Try, cst.FunctionDef, cst.Lambda)):
                return False
            if isinstance(ancestor, cst.For) and not _iterates_at_least_once(ancestor.iter):
                return False
        return False

    # -- grad mode ---------------------------------------------------------------------------
    def in_no_grad(self, node: cst.CSTNode) -> bool:
        """``node`` runs with autograd recording off (see the module docstring)."""
        for ancestor in self.ancestors(node):
            if isinstance(ancestor, cst.With):
                mode = self._with_grad_mode(ancestor)
                if mode is not None:
                    return not mode
            if isinstance(ancestor, (cst.FunctionDef, cst.Lambda)):
                return self._function_in_no_grad(ancestor)
        return False

    def _with_grad_mode(self, node: cst.With) -> bool | None:
        """False when the ``with`` turns grad off, True when it turns it on, else None."""
        for item in node.items:
            call = item.item
            if not isinstance(call, cst.Call):
                continue
            name = self.call_name(call)
            if name in NO_GRAD_CONTEXTS:
                flag = _argument(call, "mode", 0)
                return flag is not None and _is_false(flag.value)
            if name == "torch.enable_grad":
                return True
            if name == "torch.set_grad_enabled" and call.args:
                value = call.args[0].value
                if _is_false(value):
                    return False
                if _is_true(value):
                    return True
        return None

    def _function_in_no_grad(self, func: cst.FunctionDef | cst.Lambda) -> bool:
        key = id(func)
        if key in self._no_grad_cache:
            return self._no_grad_cache[key]
        self._no_grad_cache[key] = False  # recursion guard
        result = False
        if isinstance(func, cst.FunctionDef):
            result = any(self._decorator_disables_grad(d.decorator) for d in func.decorators)
            if not result and not any(
                self._decorator_enables_grad(d.decorator) for d in func.decorators
            ):
                sites = self._calls_by_name.get(func.name.value, [])
                result = bool(sites) and all(self.in_no_grad(site) for site in sites)
        self._no_grad_cache[key] = result
        return result

    def _decorator_disables_grad(self, decorator: cst.BaseExpression) -> bool:
        if isinstance(decorator, cst.Call):
            if self.call_name(decorator) in NO_GRAD_CONTEXTS:
                flag = _argument(decorator, "mode", 0)
                return flag is None or not _is_false(flag.value)
            return False
        return self.qualified_name(decorator) in NO_GRAD_CONTEXTS

    def _decorator_enables_grad(self, decorator: cst.BaseExpression) -> bool:
        target = decorator.func if isinstance(decorator, cst.Call) else decorator
        return self.qualified_name(target) == "torch.enable_grad"


#: Attributes of a tensor that are views of it (and so carry its graph).
#: Reductions that give a 0-d tensor when called without ``dim``.
_REDUCTIONS = frozenset("sum mean prod norm max min std var amax amin logsumexp median".split())
#: Elementwise functions and methods: the result has the shape of the first operand.
_ELEMENTWISE = frozenset(
    "exp log log1p log2 log10 sqrt rsqrt sin cos tan tanh sigmoid relu softplus abs neg "
    "square pow clamp clip float double half to sign erf gelu silu elu leaky_relu "
    "reciprocal atan asin acos sinh cosh".split()
)
#: Tensor methods whose result never requires grad.
_GRAD_CUTTING_METHODS = frozenset("detach detach_ item tolist numpy argmax argmin".split())
#: Tensor methods that combine the receiver with tensor arguments.
_TENSOR_METHODS = frozenset(
    "add sub mul div matmul mm bmm pow where masked_fill expand_as view_as type_as".split()
)

# -- what autograd saves for backward -------------------------------------------------------
# Autograd keeps some operands/results of an op for backward and checks their version
# counters there: an in-place change to a saved tensor, or to any view sharing its storage,
# fails at backward with "one of the variables needed for gradient computation has been
# modified by an inplace operation". Op names are torch / torch.nn.functional / torch.linalg
# function names and tensor method names; the tables follow torch 2.x ``derivatives.yaml``
# and were checked one by one on torch 2.13.

#: Ops that save every tensor operand (``log(x)``, ``x ** 2``, ``2 ** x``, ``atan2(a, b)``).
SAVES_INPUTS = frozenset(
    "log log2 log10 log1p sin cos asin acos atan arcsin arccos arctan sinh cosh asinh acosh "
    "atanh abs absolute pow square erf erfc erfinv lgamma digamma sinc i0 logit atan2 arctan2 "
    "hypot xlogy maximum minimum fmax fmin clamp clip clamp_min clamp_max amax amin prod "
    "cumprod norm vector_norm dist var std logsumexp softplus gelu silu mish elu selu celu "
    "leaky_relu hardtanh relu6 hardswish hardsigmoid logsigmoid softsign normalize layer_norm "
    "group_norm batch_norm".split()
)
#: Ops that save their result (an in-place change to the *result* breaks backward, one to the
#: input does not); ``prod``, ``norm``, ``std``, ``amax``... save both.
SAVES_OUTPUT = frozenset(
    "exp exp2 expm1 tanh sigmoid sqrt rsqrt reciprocal relu tan softmax log_softmax softmin "
    "prod cumprod norm vector_norm std logsumexp amax amin".split()
)
#: Products: an operand is saved when *another* operand requires grad (``x * c`` with a
#: constant ``c`` saves only ``c``; ``x * w`` with ``w`` requiring grad saves both).
SAVES_OTHER_OPERANDS = frozenset(
    "mul multiply matmul mm bmm mv dot vdot inner outer ger cross einsum linear tensordot "
    "kron".split()
)
#: Quotients: the divisor is always saved, the dividend when the divisor requires grad
#: (``x / 2`` saves nothing of ``x``; ``c / x`` saves ``x``).
SAVES_DIVISOR = frozenset("div divide true_divide".split())
#: Differentiable ops that keep only shapes: nothing of theirs can be invalidated.
SAVES_NOTHING = frozenset(
    "add sub subtract neg negative positive sum mean nansum cumsum clone contiguous to float "
    "double half cpu cuda cat concat concatenate stack hstack vstack where flip roll repeat "
    "tile reshape flatten squeeze unsqueeze view view_as expand expand_as t transpose permute "
    "narrow select diagonal movedim moveaxis swapaxes swapdims unfold tril triu floor ceil "
    "round trunc sign".split()
)
#: Ops whose result is a view sharing storage *and version counter* with their first
#: operand: an in-place change through either one is seen by the other's saved copies.
#: (``detach()`` cuts the graph but shares the version counter; ``reshape``/``flatten``/
#: ``contiguous`` copy only sometimes and are left out.)
VIEW_OPS = frozenset(
    "view view_as t transpose swapaxes swapdims permute movedim moveaxis unsqueeze squeeze "
    "narrow select expand expand_as diagonal unfold as_strided detach".split()
)
#: Attributes of a tensor that are views of it.
VIEW_ATTRIBUTES = frozenset("T mT H mH real imag".split())
#: Python operators -> the torch op they call.
_BINARY_OPS: dict[type[cst.BaseBinaryOp], str] = {
    cst.Add: "add",
    cst.Subtract: "sub",
    cst.Multiply: "mul",
    cst.Divide: "div",
    cst.Power: "pow",
    cst.MatrixMultiply: "matmul",
}
_UNARY_OPS: dict[type[cst.BaseUnaryOp], str] = {cst.Minus: "neg", cst.Plus: "positive"}
#: Where the torch functions of the tables live.
_OP_NAMESPACES = ("torch.", "torch.nn.functional.", "torch.linalg.")
#: Every op name known to return one tensor.
TENSOR_OPS = (
    SAVES_INPUTS | SAVES_OUTPUT | SAVES_OTHER_OPERANDS | SAVES_DIVISOR | SAVES_NOTHING | VIEW_OPS
)

#: ``nn`` containers: calling one runs the layers it holds.
_NN_CONTAINERS = frozenset(
    "torch.nn." + name for name in "Sequential ModuleList ModuleDict".split()
)
_NN_NON_LAYERS = frozenset(
    "Module ModuleList ModuleDict Sequential ParameterList ParameterDict Parameter "
    "Identity Flatten Unflatten Dropout ReLU GELU Tanh Sigmoid Softmax".split()
)


def _target_name(node: cst.CSTNode) -> str | None:
    """The ``x`` of ``x.requires_grad = ...`` or ``x.requires_grad_()``."""
    if isinstance(node, cst.Assign):
        target = node.targets[0].target
        if isinstance(target, cst.Attribute) and isinstance(target.value, cst.Name):
            return target.value.value
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
        if isinstance(node.func.value, cst.Name):
            return node.func.value.value
    return None


class VariableNames(cst.CSTVisitor):
    """Collects the ``Name`` nodes used as variables, in source order: not an attribute's
    name (``x.attr``) nor a keyword (``f(k=v)``). The name walkers of the rules subclass
    it for what they count besides (parameters, imports, assignment targets).

        collector = VariableNames()
        walk(node, collector)
        collector.names
    """

    def __init__(self) -> None:
        self.names: list[cst.Name] = []

    def visit_Name(self, node: cst.Name) -> None:
        self.names.append(node)

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        walk(node.value, self)
        return False

    def visit_Arg(self, node: cst.Arg) -> bool:
        walk(node.value, self)
        return False


def normalized_code(expr: cst.BaseExpression) -> str:
    """A key that two expressions share when they differ only in layout: whitespace,
    comments, parentheses (``x[ i ]`` and ``x[i]``; not ``"a b"`` and ``"ab"``)."""
    code = cst.Module([]).code_for_node(expr)
    try:
        return ast.dump(ast.parse(f"(\n{code}\n)", mode="eval").body)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return "".join(code.split())


def _is_self(expr: cst.BaseExpression, analysis: FileAnalysis, at: cst.CSTNode) -> bool:
    """``expr`` is the first parameter of the method enclosing ``at``."""
    if not isinstance(expr, cst.Name):
        return False
    func = analysis.enclosing_function(at)
    if func is None or not func.params.params:
        return False
    if analysis.method_class(func) is None:
        return False
    return func.params.params[0].name.value == expr.value


def _subscript_key(node: cst.Subscript) -> str | None:
    if len(node.slice) != 1 or not isinstance(node.slice[0].slice, cst.Index):
        return None
    key = node.slice[0].slice.value
    if isinstance(key, cst.SimpleString):
        value = key.evaluated_value
        return value if isinstance(value, str) else None
    return None


def _flatten_operands(args: Sequence[cst.Arg]) -> list[cst.BaseExpression]:
    """Argument values, with the elements of list/tuple literals spliced in."""
    operands: list[cst.BaseExpression] = []
    for arg in args:
        value = arg.value
        if isinstance(value, (cst.List, cst.Tuple)):
            operands.extend(e.value for e in value.elements)
        else:
            operands.append(value)
    return operands


def _iterated_source(
    iterable: cst.BaseExpression, unpack_index: int | None
) -> cst.BaseExpression | None:
    """What a loop variable is taken from: ``x`` for ``for row in x``, the i-th argument
    for ``for a, b in zip(x, y)``, ``x`` for the second name of ``enumerate(x)``."""
    if unpack_index is None:
        return iterable
    if not (isinstance(iterable, cst.Call) and isinstance(iterable.func, cst.Name)):
        return None
    args = iterable.args
    if any(a.keyword is not None or a.star for a in args):
        return None
    if iterable.func.value == "zip" and unpack_index < len(args):
        return args[unpack_index].value
    if iterable.func.value == "enumerate" and unpack_index == 1 and len(args) == 1:
        return args[0].value
    return None


def _literal_items(value: cst.BaseExpression) -> list[cst.BaseExpression] | None:
    """The items of a list/tuple literal without ``*unpacking`` (None otherwise)."""
    if not isinstance(value, (cst.List, cst.Tuple)):
        return None
    if any(isinstance(e, cst.StarredElement) for e in value.elements):
        return None
    return [e.value for e in value.elements]


def _iterates_at_least_once(iterable: cst.BaseExpression) -> bool:
    """``range(3)``, ``range(1, 4)``, ``[a, b]``: a loop over it runs its body."""
    if isinstance(iterable, (cst.List, cst.Tuple)):
        return bool(iterable.elements) and _literal_items(iterable) is not None
    if not (isinstance(iterable, cst.Call) and isinstance(iterable.func, cst.Name)):
        return False
    args = [a.value for a in iterable.args]
    if iterable.func.value != "range" or not 1 <= len(args) <= 2:
        return False
    if not all(isinstance(a, cst.Integer) for a in args):
        return False
    bounds = [int(a.value, 0) for a in args]  # type: ignore[attr-defined]
    return bounds[-1] > (bounds[0] if len(bounds) == 2 else 0)


def _is_none_assign(binding: Binding) -> bool:
    return (
        binding.kind == "assign"
        and isinstance(binding.value, cst.Name)
        and (binding.value.value == "None")
    )


def is_number_literal(expr: cst.BaseExpression) -> bool:
    """``3``, ``0.5``, ``-2``, ``+1e-3``: a Python number written in the source."""
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, (cst.Minus, cst.Plus)):
        return is_number_literal(expr.expression)
    return isinstance(expr, (cst.Integer, cst.Float))


def _is_true(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.Name) and expr.value == "True"


def _is_false(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.Name) and expr.value == "False"


def _argument(call: cst.Call, keyword: str, position: int | None) -> cst.Arg | None:
    """The argument passed as ``keyword=`` or at ``position`` (positional only)."""
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == keyword:
            return arg
    if position is not None:
        positional = [a for a in call.args if a.keyword is None and not a.star]
        if len(positional) > position:
            return positional[position]
    return None


argument = _argument
is_true = _is_true
is_false = _is_false
#: Reductions that give a 0-d tensor when called without ``dim`` (``row.sum()``).
REDUCTIONS = _REDUCTIONS
