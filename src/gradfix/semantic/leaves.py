"""Why an expression holds a leaf tensor that requires grad."""

from __future__ import annotations

import ast

from gradfix.semantic.modules import ModuleQueries
from gradfix.semantic.scopes import Binding, LeafReason, Scope
from gradfix.semantic.syntax import argument, dotted, is_false, is_true, target_name
from gradfix.torch_facts import FACTORIES, LAYER_PARAMETERS


class LeafQueries(ModuleQueries):
    #: every ``x.requires_grad = flag`` / ``x.requires_grad_(flag)`` once asked
    _requires_grad_all: list[tuple[ast.AST, bool]] | None = None
    #: why each parameter asked about holds a leaf because of what its callers pass
    _passed_leaf_cache: dict[ast.arg, LeafReason | None] | None = None

    def leaf_reason(
        self, expr: ast.AST, at: ast.AST | None = None, _depth: int = 0
    ) -> LeafReason | None:
        """Why ``expr`` (evaluated at ``at``) holds a leaf tensor that requires grad."""
        if _depth > 8:
            return None
        at = at if at is not None else expr
        if type(expr) is ast.Name:
            return self._name_leaf_reason(expr, at, _depth)
        if type(expr) is ast.Attribute:
            return self._attribute_leaf_reason(expr, at, _depth)
        return self.leaf_value_reason(expr, at, _depth)

    def leaf_value_reason(self, value: ast.AST, at: ast.AST, _depth: int = 0) -> LeafReason | None:
        """Why evaluating ``value`` creates a leaf that requires grad."""
        if _depth > 8:
            return None  # a function that returns a call of itself, a chain of aliases
        if type(value) is ast.Name or type(value) is ast.Attribute:
            return self.leaf_reason(value, at, _depth + 1)
        if type(value) is not ast.Call:
            return None
        name = self.call_name(value)
        if name == "torch.nn.Parameter":
            flag = argument(value, "requires_grad", 1)
            return LeafReason("an nn.Parameter") if not is_false(flag) else None
        if name in FACTORIES:
            if is_true(argument(value, "requires_grad", None)):
                return LeafReason(f"created with requires_grad=True by {name}()")
            return None
        func = value.func
        if type(func) is ast.Attribute and func.attr == "requires_grad_":
            flag = argument(value, "requires_grad", 0)
            if flag is None or is_true(flag):
                return LeafReason("marked with .requires_grad_()")
        returned = self.returned_values(value, at)
        return self._returned_leaf_reason(dotted(func), returned, _depth)

    def _returned_leaf_reason(
        self, callee: str, returned: list[tuple[ast.expr, ast.AST]] | None, depth: int
    ) -> LeafReason | None:
        """Every value a function of this file returns is a leaf that requires grad."""
        if not returned:
            return None
        reasons = [self.leaf_value_reason(v, ret, depth + 1) for v, ret in returned]
        if not all(reasons):
            return None
        return LeafReason(f"returned by {callee}(), {reasons[0].description}")  # type: ignore[union-attr]

    def _name_leaf_reason(self, name: ast.Name, at: ast.AST, depth: int) -> LeafReason | None:
        binding = self.reaching_binding(name, at)
        if binding is None:
            return None
        reason: LeafReason | None = None
        if binding.kind == "assign" and binding.unpack_index is not None:
            callee = dotted(binding.value.func) if type(binding.value) is ast.Call else ""
            reason = self._returned_leaf_reason(callee, self.unpacked_call_values(binding), depth)
        elif binding.kind == "assign" and binding.value is not None:
            reason = self.leaf_value_reason(binding.value, binding.node, depth + 1)
        elif binding.kind == "for" and binding.value is not None:
            reason = self.parameter_iteration(binding.value, binding.unpack_index, depth)
        elif binding.kind == "param" and binding.annotation is not None:
            if self.is_torch_name(binding.annotation, "torch.nn.Parameter"):
                reason = LeafReason("annotated nn.Parameter")
        if binding.kind == "param" and type(binding.node) is ast.arg and reason is None:
            reason = self._passed_leaf_reason(binding.node, depth)
        marked = self._requires_grad_marks(name.id, binding, at)
        if marked is True and reason is None:
            reason = LeafReason("marked with requires_grad = True")
        if marked is False:
            return None
        if reason is not None:
            reason.binding = binding
        return reason

    def _passed_leaf_reason(self, param: ast.arg, depth: int) -> LeafReason | None:
        """Every call site in this file passes a leaf that requires grad for ``param``
        (``init_table(E=self.emb.weight)``). Answered once per parameter (a parameter
        passed on to other functions would otherwise be asked again at every depth)."""
        if self._passed_leaf_cache is None:
            self._passed_leaf_cache = {}
        if param in self._passed_leaf_cache:
            return self._passed_leaf_cache[param]
        self._passed_leaf_cache[param] = None  # recursion guard
        passed = self.passed_arguments(param)
        reasons = [self.leaf_reason(arg, site, depth + 1) for arg, site in passed]
        reason = None
        if reasons and all(reasons):
            reason = LeafReason(f"`{param.arg}` is passed {reasons[0].description}")  # type: ignore[union-attr]
        self._passed_leaf_cache[param] = reason
        return reason

    def _requires_grad_marks(self, name: str, binding: Binding, at: ast.AST) -> bool | None:
        """The last ``name.requires_grad = X`` or ``name.requires_grad_(X)`` after ``binding``."""
        scope = self.scope_of(at)
        position = self._order[at]
        last: tuple[int, bool] | None = None
        for node, flag in self._requires_grad_statements(scope):
            start = self._order[node]
            if binding.end < start and self._last[node] < position:
                if target_name(node) != name:
                    continue
                if last is None or start > last[0]:
                    last = (start, flag)
        return None if last is None else last[1]

    def _requires_grad_statements(self, scope: Scope) -> list[tuple[ast.AST, bool]]:
        """Statements ``x.requires_grad = flag`` and ``x.requires_grad_(flag)`` in ``scope``
        (nested scopes included), found from the index of attributes, without a walk."""
        key = scope.node
        if key not in self._requires_grad_cache:
            start, end = self._order[key], self._last[key]
            self._requires_grad_cache[key] = [
                (node, flag)
                for node, flag in self._all_requires_grad_statements()
                if start <= self._order[node] <= end
            ]
        return self._requires_grad_cache[key]

    def _all_requires_grad_statements(self) -> list[tuple[ast.AST, bool]]:
        if self._requires_grad_all is None:
            found: list[tuple[ast.AST, bool]] = []
            for attr in self._attributes.get("requires_grad", []):
                assign = self._parents.get(attr)
                if type(assign) is ast.Assign and attr in assign.targets:
                    if is_true(assign.value) or is_false(assign.value):
                        found.append((assign, is_true(assign.value)))
            for attr in self._attributes.get("requires_grad_", []):
                call = self._parents.get(attr)
                if type(call) is ast.Call and call.func is attr:
                    flag = argument(call, "requires_grad", 0)
                    found.append((call, flag is None or is_true(flag)))
            found.sort(key=lambda pair: self._order[pair[0]])
            self._requires_grad_all = found
        return self._requires_grad_all

    def _attribute_leaf_reason(
        self, attr: ast.Attribute, at: ast.AST, depth: int
    ) -> LeafReason | None:
        if self.is_self(attr.value, at):
            return self._self_attribute_leaf_reason(attr, at, depth)
        if attr.attr in LAYER_PARAMETERS and self.is_nn_layer(attr.value, at):
            return LeafReason(f"the .{attr.attr} parameter of an nn layer")
        if attr.attr in LAYER_PARAMETERS and self._submodule_of_module(attr.value, at, depth):
            return LeafReason(f"the .{attr.attr} parameter of a submodule")
        return None

    def _submodule_of_module(self, expr: ast.AST, at: ast.AST, depth: int) -> bool:
        """``expr`` is reached from a module through attributes and indexing
        (``model.encoder.layers[i].fc``): a submodule, whose ``weight`` is a parameter."""
        steps = 0
        while type(expr) is ast.Attribute or type(expr) is ast.Subscript:
            if type(expr) is ast.Attribute and expr.attr in ("data", "grad"):
                return False
            expr, steps = expr.value, steps + 1  # type: ignore[attr-defined]
        return steps > 0 and self.is_module(expr, at, depth + 1)

    def _self_attribute_leaf_reason(
        self, attr: ast.Attribute, at: ast.AST, depth: int
    ) -> LeafReason | None:
        cls = self.enclosing_class(at)
        if cls is None:
            return None
        assigned = self._class_attrs.get(cls, {}).get(attr.attr, [])
        if not assigned:
            return None
        reasons = [self.leaf_value_reason(value, b.node, depth + 1) for value, b in assigned]
        if all(reasons):
            return LeafReason(f"self.{attr.attr}, {reasons[0].description}")  # type: ignore[union-attr]
        return None

    def parameter_iteration(
        self, iterable: ast.expr, unpack_index: int | None, depth: int
    ) -> LeafReason | None:
        """A loop variable over ``.parameters()`` (or the value of ``.named_parameters()``)."""
        kind = self.parameter_iterable(iterable, depth)
        if kind == "parameters" and unpack_index is None:
            return LeafReason("a parameter from .parameters()")
        if kind == "named_parameters" and unpack_index == 1:
            return LeafReason("a parameter from .named_parameters()")
        return None
