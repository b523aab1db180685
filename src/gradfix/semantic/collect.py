"""The one traversal of a module: parents, pre-order indices, scopes, bindings, call sites."""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import Any

from gradfix.semantic.scopes import SCOPE_TYPES, Binding, Scope
from gradfix.semantic.syntax import (
    argument_value,
    call_arguments,
    children_function,
    is_function,
    is_super_call,
    parameter_defaults,
    string_value,
)

_FUNCTION_TYPES = (ast.FunctionDef, ast.AsyncFunctionDef)


class Collector:
    """Walks a module once (pre-order, in source order, with an explicit stack) and
    records what every query of :class:`~gradfix.semantic.Semantic` reads."""

    def __init__(self, walked: frozenset[type] = frozenset()) -> None:
        """``walked``: the node types whose nodes :attr:`walked` lists (the rules' walk)."""
        self.walked_types = walked
        #: the nodes of the ``walked`` types, in pre-order: what the rules' walk visits
        #: (sorting them from ``by_type`` afterwards looked up every node's index again)
        self.walked: list[ast.AST] = []
        self.parents: dict[ast.AST, ast.AST] = {}
        self.order: dict[ast.AST, int] = {}
        self.by_type: dict[type, list[ast.AST]] = {}  # the nodes of each type, in pre-order
        self.last: dict[ast.AST, int] = {}
        self.scopes: dict[ast.AST, Scope] = {}
        self.names: dict[str, list[ast.Name]] = {}  # every Name node by spelling, in order
        self.name_orders: dict[str, list[int]] = {}  # their pre-order indices
        #: every ``x.<attr>`` by attribute name, in order (``requires_grad`` marks)
        self.attributes: dict[str, list[ast.Attribute]] = {}
        self.calls_by_name: dict[str, list[ast.Call]] = {}
        #: ``super().name(...)`` by name: they run the method of a base class only
        self.super_calls: dict[str, list[ast.Call]] = {}
        self.subscript_assigns: dict[str, list[tuple[ast.AST, ast.expr]]] = {}
        self.class_attrs: dict[ast.AST, dict[str, list[tuple[ast.expr, Binding]]]] = {}
        self.returns: dict[ast.AST, list[ast.Return]] = {}
        self.generators: set[ast.AST] = set()
        self.imports: list[Binding] = []  # every binding an import makes, in source order
        self._scope_stack: list[Scope] = []
        self._pending: list[Binding] = []
        self._defaults: dict[ast.arg, ast.expr] = {}  # a parameter's default

    def collect(self, module: ast.Module) -> None:
        counter = 0
        parents, order, last = self.parents, self.order, self.last
        plans, by_type, attributes = _PLANS, self.by_type, self.attributes
        names, name_orders = self.names, self.name_orders
        scope_stack = self._scope_stack
        walked_types, walked = self.walked_types, self.walked
        # the most frequent types are decided before the set is asked
        walk_names, walk_constants = ast.Name in walked_types, ast.Constant in walked_types
        walk_attributes = ast.Attribute in walked_types
        # a node to enter, or ``(node,)`` once its subtree is done (no tuple per child)
        stack: list[Any] = [module]
        while stack:
            node = stack.pop()
            kind = type(node)
            if kind is tuple:
                done = node[0]
                last[done] = counter - 1
                if type(done) in SCOPE_TYPES:
                    scope_stack.pop()
                continue
            index = counter
            order[node] = index
            counter += 1
            of_kind = by_type.get(kind)
            if of_kind is None:
                by_type[kind] = [node]
            else:
                of_kind.append(node)
            if kind is ast.Name:
                if walk_names:
                    walked.append(node)
                spelled = names.get(node.id)
                if spelled is None:
                    names[node.id] = [node]
                    name_orders[node.id] = [index]
                else:
                    spelled.append(node)
                    name_orders[node.id].append(index)
                last[node] = index  # a leaf (its ``ctx`` is a shared singleton)
                continue
            if kind is ast.Constant:
                if walk_constants:
                    walked.append(node)
                last[node] = index  # most nodes are names and constants: no children
                continue
            if kind is ast.Attribute:  # the next most frequent: one child, no recorder
                if walk_attributes:
                    walked.append(node)
                attrs = attributes.get(node.attr)
                if attrs is None:
                    attributes[node.attr] = [node]
                else:
                    attrs.append(node)
                value = node.value
                parents[value] = node
                stack.append((node,))
                stack.append(value)
                continue
            if kind in walked_types:
                walked.append(node)
            plan = plans.get(kind)
            if plan is None:
                plan = plans[kind] = _plan(kind)
            opens, recorder, children_of = plan
            if opens:
                self._enter_scope(node)
            if recorder is not None:
                recorder(self, node)
            children = children_of(node)
            if not children and not opens:
                last[node] = index  # a leaf: nothing to wait for
                continue
            stack.append((node,))
            for child in children:
                parents[child] = node
            stack += reversed(children)
        self._finish()

    def _enter_scope(self, node: ast.AST) -> None:
        parent = self._scope_stack[-1] if self._scope_stack else None
        if parent is not None and type(node) in (*_FUNCTION_TYPES, ast.ClassDef):
            kind = "def" if is_function(node) else "class"
            self._bind(parent, node.name, kind, node, None)  # type: ignore[attr-defined]
        scope = Scope(node, parent)
        self.scopes[node] = scope
        self._scope_stack.append(scope)

    @property
    def _scope(self) -> Scope:
        return self._scope_stack[-1]

    def _bind(
        self,
        scope: Scope,
        name: str,
        kind: str,
        node: ast.AST,
        value: ast.expr | None,
        qualified: str | None = None,
        unpack_index: int | None = None,
        annotation: ast.expr | None = None,
    ) -> Binding:
        binding = Binding(
            name, kind, node, value, self.order[node], -1, qualified, unpack_index, annotation
        )
        of_name = scope.bindings.get(name)  # the scope's bindings of the name, in order
        if of_name is None:
            scope.bindings[name] = [binding]
        else:
            of_name.append(binding)
        self._pending.append(binding)
        return binding

    def _finish(self) -> None:
        last, defaults = self.last, self._defaults
        for binding in self._pending:
            node = binding.node
            kind = type(node)
            if kind is ast.comprehension:
                binding.end = -1  # visible in the whole comprehension, element included
            elif kind is ast.For or kind is ast.AsyncFor:
                binding.end = last[node.iter]  # visible in the loop body
            elif kind is ast.arg and node in defaults:
                binding.end = last[defaults[node]]  # the default sees outside
            else:
                binding.end = last.get(node, binding.start)

    # -- what binds names ------------------------------------------------------------------
    def _record_assign(self, node: ast.Assign) -> None:
        scope = self._scope_stack[-1]
        value = node.value
        for target in node.targets:
            if type(target) is ast.Name:  # most assignments: ``x = ...`` in a function
                self._bind(scope, target.id, "assign", node, value)
                if scope.is_class:
                    self._record_class_level(target, value, node)
                continue
            self._bind_target(target, node, value, "assign")
            if type(target) is ast.Subscript and type(target.value) is ast.Name:
                entry = (node, node.value)
                self.subscript_assigns.setdefault(target.value.id, []).append(entry)

    def _record_ann_assign(self, node: ast.AnnAssign) -> None:
        self._bind_target(node.target, node, node.value, "assign", annotation=node.annotation)
        if node.value is not None:
            self._record_class_level(node.target, node.value, node)

    def _record_aug_assign(self, node: ast.AugAssign) -> None:
        self._bind_target(node.target, node, None, "augassign")

    def _record_for(self, node: ast.For | ast.AsyncFor | ast.comprehension) -> None:
        self._bind_target(node.target, node, node.iter, "for")

    def _record_with_item(self, node: ast.withitem) -> None:
        if node.optional_vars is not None:
            self._bind_target(node.optional_vars, node, node.context_expr, "with")

    def _record_named_expr(self, node: ast.NamedExpr) -> None:
        self._bind_target(node.target, node, node.value, "assign")

    def _record_defaults(self, node: ast.arguments) -> None:
        for arg, default in parameter_defaults(node):
            if default is not None:
                self._defaults[arg] = default

    def _record_parameter(self, node: ast.arg) -> None:
        self._bind(
            self._scope_stack[-1], node.arg, "param", node, None, None, None, node.annotation
        )

    def _record_except_handler(self, node: ast.ExceptHandler) -> None:
        if node.name is not None:
            self._bind(self._scope, node.name, "other", node, None)

    def _bind_target(
        self,
        target: ast.expr,
        node: ast.AST,
        value: ast.expr | None,
        kind: str,
        unpack_index: int | None = None,
        annotation: ast.expr | None = None,
    ) -> None:
        if type(target) is ast.Starred:
            target = target.value
        if type(target) is ast.Name:
            self._bind(
                self._scope_stack[-1], target.id, kind, node, value, None, unpack_index, annotation
            )
        elif type(target) is ast.Tuple or type(target) is ast.List:
            elements = target.elts
            values: list[ast.expr | None] = [None] * len(elements)
            if (type(value) is ast.Tuple or type(value) is ast.List) and len(value.elts) == len(
                elements
            ):
                values = [argument_value(v) for v in value.elts]
            for index, element in enumerate(elements):
                item = values[index]
                if item is not None:
                    self._bind_target(element, node, item, kind)
                elif unpack_index is not None:
                    # ``for i, (h, w) in enumerate(shapes)``: what ``h`` holds is unknown
                    self._bind_target(element, node, None, kind, unpack_index=index)
                else:
                    self._bind_target(element, node, value, kind, unpack_index=index)
        elif type(target) is ast.Attribute and value is not None and kind == "assign":
            self._record_self_attribute(target.value, target.attr, value, node)

    def _record_class_level(self, target: ast.expr, value: ast.expr, node: ast.AST) -> None:
        """``x = None`` / ``x: T = default`` in a class body (a dataclass field, a class
        default) is one more value ``self.x`` may hold."""
        if not self._scope.is_class or type(target) is not ast.Name:
            return
        binding = Binding(target.id, "assign", node, value, self.order[node], -1)
        self._pending.append(binding)
        attrs = self.class_attrs.setdefault(self._scope.node, {})
        attrs.setdefault(target.id, []).append((value, binding))

    def _record_self_attribute(
        self, owner: ast.expr, attr: str, value: ast.expr, node: ast.AST
    ) -> None:
        method = self._scope.node
        class_scope = self._scope.parent
        if not is_function(method) or class_scope is None:
            return
        params = method.args.args  # type: ignore[attr-defined]
        if not class_scope.is_class or not params:
            return
        if type(owner) is ast.Name and owner.id == params[0].arg:
            binding = Binding(attr, "assign", node, value, self.order[node], -1)
            self._pending.append(binding)
            attrs = self.class_attrs.setdefault(class_scope.node, {})
            attrs.setdefault(attr, []).append((value, binding))

    def _record_import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.asname is not None:
                local, qualified = alias.asname, alias.name
            else:
                local = qualified = alias.name.split(".")[0]
            self.imports.append(
                self._bind(self._scope, local, "import", node, None, qualified=qualified)
            )

    def _record_import_from(self, node: ast.ImportFrom) -> None:
        if node.level or node.module is None or node.names[0].name == "*":
            return
        for alias in node.names:
            local = alias.asname or alias.name
            qualified = f"{node.module}.{alias.name}"
            self.imports.append(
                self._bind(self._scope, local, "import", node, None, qualified=qualified)
            )

    def _record_call(self, node: ast.Call) -> None:
        func = node.func
        calls_by_name = self.calls_by_name
        if type(func) is ast.Name:
            _add(calls_by_name, func.id, node)
        elif type(func) is ast.Attribute:
            by_name = self.super_calls if is_super_call(func.value) else calls_by_name
            _add(by_name, func.attr, node)
            if func.attr == "register_parameter":
                arguments = call_arguments(node)
                if len(arguments) >= 2:
                    attr = string_value(argument_value(arguments[0]))
                    if attr is not None and attr.isidentifier():
                        value = argument_value(arguments[1])
                        self._record_self_attribute(func.value, attr, value, node)
        # A function passed by reference (``model.apply(init_fn)``) runs where the call is
        # (the values of the positional, then the keyword arguments: no list is built for
        # each of the file's calls).
        for argument in node.args:
            _record_reference(calls_by_name, argument, node)
        for keyword in node.keywords:
            _record_reference(calls_by_name, keyword.value, node)

    def _record_return(self, node: ast.Return) -> None:
        if is_function(self._scope.node):
            self.returns.setdefault(self._scope.node, []).append(node)

    def _record_yield(self, node: ast.Yield | ast.YieldFrom) -> None:
        self.generators.add(self._scope.node)


def _record_reference(
    calls_by_name: dict[str, list[ast.Call]], ref: ast.expr, call: ast.Call
) -> None:
    """``call`` under the name of a function it is passed (``f``, ``self.f``, ``*f``)."""
    if type(ref) is ast.Starred:
        ref = ref.value
    if type(ref) is ast.Name:
        _add(calls_by_name, ref.id, call)
    elif type(ref) is ast.Attribute:
        _add(calls_by_name, ref.attr, call)


def _add(index: dict[str, list[ast.Call]], name: str, call: ast.Call) -> None:
    """``index.setdefault(name, []).append(call)`` without a new list at every call."""
    calls = index.get(name)
    if calls is None:
        index[name] = [call]
    else:
        calls.append(call)


def _plan(kind: type) -> tuple[bool, Callable[[Collector, Any], None] | None, Callable]:
    """What the traversal does with a node of type ``kind``: whether it opens a scope,
    what it records, how its children are found (asked once per type)."""
    return kind in SCOPE_TYPES, _RECORDERS.get(kind), children_function(kind)


#: node type -> :func:`_plan` of it, filled as types are met
_PLANS: dict[type, tuple[bool, Callable[[Collector, Any], None] | None, Callable]] = {}

#: what each node type records: plain functions, not bound methods (a collector holding
#: its own bound methods is a reference cycle, and its whole tree and analysis would wait
#: for the cyclic garbage collector instead of being freed when the lint ends)
_RECORDERS: dict[type, Callable[[Collector, Any], None]] = {
    ast.Assign: Collector._record_assign,
    ast.AnnAssign: Collector._record_ann_assign,
    ast.AugAssign: Collector._record_aug_assign,
    ast.For: Collector._record_for,
    ast.AsyncFor: Collector._record_for,
    ast.comprehension: Collector._record_for,
    ast.withitem: Collector._record_with_item,
    ast.NamedExpr: Collector._record_named_expr,
    ast.arguments: Collector._record_defaults,
    ast.arg: Collector._record_parameter,
    ast.ExceptHandler: Collector._record_except_handler,
    ast.Import: Collector._record_import,
    ast.ImportFrom: Collector._record_import_from,
    ast.Call: Collector._record_call,
    ast.Return: Collector._record_return,
    ast.Yield: Collector._record_yield,
    ast.YieldFrom: Collector._record_yield,
}
