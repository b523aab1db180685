"""``nn`` layers, modules and iterations over their parameters."""

from __future__ import annotations

import ast

from gradfix.semantic.syntax import argument_values, subscript_key
from gradfix.semantic.values import ValueQueries
from gradfix.torch_facts import NN_CONTAINERS, NN_NON_LAYERS


class ModuleQueries(ValueQueries):
    def is_nn_layer(self, expr: ast.AST, at: ast.AST, _depth: int = 0) -> bool:
        """``expr`` holds an instance of a ``torch.nn`` layer class (``nn.Linear(...)``)."""
        if _depth > 8:
            return False
        if type(expr) is ast.Call:
            name = self.call_name(expr) or ""
            head, _, last = name.rpartition(".")
            return head == "torch.nn" and last[:1].isupper() and last not in NN_NON_LAYERS
        if type(expr) is ast.Name:
            binding = self.reaching_binding(expr, at)
            if binding is not None and binding.kind == "assign" and binding.value is not None:
                return self.is_nn_layer(binding.value, binding.node, _depth + 1)
            return False
        if type(expr) is ast.Attribute and self.is_self(expr.value, at):
            cls = self.enclosing_class(at)
            if cls is None:
                return False
            assigned = self._class_attrs.get(cls, {}).get(expr.attr, [])
            return bool(assigned) and all(
                self.is_nn_layer(value, b.node, _depth + 1) for value, b in assigned
            )
        return False

    def nn_module_class(self, expr: ast.AST, at: ast.AST, _depth: int = 0) -> str | None:
        """The ``torch.nn`` class whose instance ``expr`` holds, parameterless ones included
        (``"ReLU"`` for ``self.act`` after ``self.act = nn.ReLU(inplace=True)``): a
        constructor call, a name bound to one, a ``self.`` attribute every assignment of
        which builds the same class. None when unknown."""
        if _depth > 8:
            return None
        if type(expr) is ast.Call:
            name = self.call_name(expr) or ""
            head, _, last = name.rpartition(".")
            return last if head == "torch.nn" and last[:1].isupper() else None
        values: list[tuple[ast.expr, ast.AST]] = []
        if type(expr) is ast.Name:
            binding = self.reaching_binding(expr, at)
            if binding is not None and binding.kind == "assign" and binding.value is not None:
                if binding.unpack_index is None:
                    values = [(binding.value, binding.node)]
        elif type(expr) is ast.Attribute:
            values = [(v, b.node) for v, b in self.self_attribute_values(expr, at)]
        classes = {self.nn_module_class(v, node, _depth + 1) for v, node in values}
        return classes.pop() if len(classes) == 1 else None

    def is_module(self, expr: ast.AST, at: ast.AST, _depth: int = 0) -> bool:
        """``expr`` holds an ``nn.Module`` whose call runs layers: an ``nn`` layer, an
        ``nn.Sequential`` / ``ModuleList`` / ``ModuleDict``, an instance of an ``nn.Module``
        subclass of this file (``model = Net()``), or a function parameter that every call
        site in this file passes such a module (``train_epoch(model, ...)``)."""
        if _depth > 8:
            return False
        if self.is_nn_layer(expr, at):
            return True
        if type(expr) is ast.Call:
            if (self.call_name(expr) or "") in NN_CONTAINERS:
                return True
            return self._is_module_class(expr.func, _depth) or self._returns_module(expr, _depth)
        if type(expr) is ast.Name:
            binding = self.reaching_binding(expr, at)
            if binding is None or binding.unpack_index is not None:
                return False
            if binding.kind == "assign" and binding.value is not None:
                return self.is_module(binding.value, binding.node, _depth + 1)
            if binding.kind == "param" and type(binding.node) is ast.arg:
                passed = self.passed_arguments(binding.node)
                return bool(passed) and all(
                    self.is_module(arg, site, _depth + 1) for arg, site in passed
                )
            return False
        values = self.self_attribute_values(expr, at) if type(expr) is ast.Attribute else []
        return bool(values) and all(self.is_module(v, b.node, _depth + 1) for v, b in values)

    def _returns_module(self, call: ast.Call, depth: int) -> bool:
        """``call`` runs a function of this file every ``return`` of which hands back a
        module (``def build_mlp(...): ... return nn.Sequential(*layers)``)."""
        returned = self.returned_values(call, call)
        return bool(returned) and all(
            self.is_module(value, ret, depth + 1) for value, ret in returned or ()
        )

    def _is_module_class(self, func: ast.AST, depth: int) -> bool:
        """``func`` names a class of this file that subclasses ``nn.Module`` (directly or
        through other classes of this file)."""
        if type(func) is not ast.Name or depth > 8:
            return False
        bindings = self.bindings(func)
        if len(bindings) != 1 or type(bindings[0].node) is not ast.ClassDef:
            return False
        return any(
            self.is_module_base(base) or self._is_module_class(base, depth + 1)
            for base in bindings[0].node.bases
        )

    def is_module_base(self, base: ast.AST) -> bool:
        """``base`` names a ``torch.nn`` class (``nn.Module``, ``nn.Linear``)."""
        name = self.qualified_name(base) or ""
        return name.startswith("torch.nn.") and name.rpartition(".")[2][:1].isupper()

    def parameter_iterable(self, expr: ast.AST, depth: int = 0) -> str | None:
        """'parameters' / 'named_parameters' when iterating ``expr`` yields parameters."""
        if depth > 8:
            return None
        if type(expr) is ast.Call:
            func = expr.func
            if type(func) is ast.Attribute and func.attr in ("parameters", "named_parameters"):
                return func.attr
            values = argument_values(expr)
            if type(func) is ast.Name and func.id in ("list", "tuple", "filter") and values:
                return self.parameter_iterable(values[-1], depth + 1)
        if type(expr) is ast.Subscript and subscript_key(expr) == "params":
            # ``for p in group["params"]`` with ``group`` from ``optimizer.param_groups``
            base = expr.value
            if type(base) is ast.Name:
                binding = self.reaching_binding(base)
                if binding and binding.kind == "for" and type(binding.value) is ast.Attribute:
                    if binding.value.attr == "param_groups":
                        return "parameters"
        if type(expr) is ast.Name:
            binding = self.reaching_binding(expr)
            if binding is not None and binding.kind == "assign" and binding.value is not None:
                return self.parameter_iterable(binding.value, depth + 1)
        return None
