"""Values flowing through the functions, lists and ``self`` attributes of a file."""

from __future__ import annotations

import ast

from gradfix.semantic.names import NameQueries
from gradfix.semantic.scopes import Binding
from gradfix.semantic.syntax import (
    argument,
    argument_value,
    call_arguments,
    is_unpacked,
    literal_items,
)

#: List methods that only read the list.
_READING_METHODS = ("index", "count", "copy")


class ValueQueries(NameQueries):
    _def_names: frozenset[str] | None = None  # the answer of ``_function_names`` once asked

    def is_self(self, expr: ast.AST, at: ast.AST) -> bool:
        """``expr`` is the first parameter of the method enclosing ``at``."""
        if type(expr) is not ast.Name:
            return False
        func = self.enclosing_function(at)
        if func is None or not func.args.args:
            return False
        if self.method_class(func) is None:
            return False
        return func.args.args[0].arg == expr.id

    def self_attribute_values(
        self, attr: ast.Attribute, at: ast.AST
    ) -> list[tuple[ast.expr, Binding]]:
        """The values ``self.<attr>`` is assigned anywhere in the class of the method
        enclosing ``at`` (``[]`` when ``attr`` is not an attribute of ``self``)."""
        if not self.is_self(attr.value, at):
            return []
        cls = self.enclosing_class(at)
        assigned = self._class_attrs.get(cls, {}) if cls is not None else {}
        return list(assigned.get(attr.attr, []))

    def local_function(self, func: ast.AST, at: ast.AST) -> ast.FunctionDef | None:
        """The function of this file that calling ``func`` runs: a ``def`` that is the only
        binding of its name (``make_weights()``), or a method of the enclosing class called
        on ``self`` (``self.build()``). Generators and ``async def`` are not followed."""
        spelled = func.id if type(func) is ast.Name else getattr(func, "attr", None)
        if spelled not in self._function_names():
            return None  # cheap first: ``self.proj(x)``, ``F.relu(x)``: no ``def`` of it
        found: ast.AST | None = None
        if type(func) is ast.Name:
            bindings = self.bindings(func)
            if len(bindings) == 1 and bindings[0].kind == "def":
                found = bindings[0].node
        elif type(func) is ast.Attribute:
            if self.is_self(func.value, at):
                cls = self.enclosing_class(at)
            else:
                cls = self._instance_class(func.value, at)
            scope = self._scopes.get(cls) if cls is not None else None
            methods = scope.bindings.get(func.attr, []) if scope is not None else []
            if len(methods) == 1 and methods[0].kind == "def":
                found = methods[0].node
        if type(found) is not ast.FunctionDef:
            return None
        return None if found in self._generators else found

    def _function_names(self) -> frozenset[str]:
        """The names of the file's ``def`` statements (at any depth)."""
        if self._def_names is None:
            functions = self._by_type.get(ast.FunctionDef, [])
            self._def_names = frozenset(f.name for f in functions)  # type: ignore[attr-defined]
        return self._def_names

    def _instance_class(self, expr: ast.expr, at: ast.AST) -> ast.ClassDef | None:
        """The class of this file whose instance the name ``expr`` holds where it is read:
        ``decoder = Decoder(8)`` then ``decoder.sample(x)`` runs ``Decoder.sample``."""
        if type(expr) is not ast.Name:
            return None
        binding = self.reaching_binding(expr, at)
        if binding is None or binding.kind != "assign" or binding.unpack_index is not None:
            return None
        value = binding.value
        if type(value) is not ast.Call or type(value.func) is not ast.Name:
            return None
        classes = self.bindings(value.func)
        if len(classes) != 1 or classes[0].kind != "class":
            return None
        node = classes[0].node
        return node if type(node) is ast.ClassDef else None

    def returned_values(
        self, call: ast.Call, at: ast.AST, unpack_index: int | None = None
    ) -> list[tuple[ast.expr, ast.AST]] | None:
        """What a call of a function of this file returns: ``(value, return statement)`` per
        ``return``; with ``unpack_index``, the element at that position of each returned
        tuple (``w, b = init()``). None when the callee or an element is unknown, or some
        path returns nothing."""
        func = self.local_function(call.func, at)
        returns = self._returns.get(func, []) if func is not None else []
        values: list[tuple[ast.expr, ast.AST]] = []
        for ret in returns:
            value = ret.value
            if value is None:
                return None
            if unpack_index is not None:
                if type(value) is not ast.Tuple and type(value) is not ast.List:
                    return None
                if len(value.elts) <= unpack_index:
                    return None
                value = value.elts[unpack_index]
                if type(value) is ast.Starred:
                    return None
            values.append((value, ret))
        return values or None

    def unpacked_call_values(self, binding: Binding) -> list[tuple[ast.expr, ast.AST]] | None:
        """For ``a, b = f()`` with ``f`` of this file: what ``f`` returns at the name's
        position."""
        if binding.unpack_index is None or type(binding.value) is not ast.Call:
            return None
        return self.returned_values(binding.value, binding.node, binding.unpack_index)

    def passed_arguments(self, param: ast.arg) -> list[tuple[ast.expr, ast.Call]]:
        """What the call sites of the function in this file pass for ``param``."""
        func = self.enclosing_function(param)
        if func is None or param not in func.args.args:
            return []
        position = func.args.args.index(param)
        is_method = self.method_class(func) is not None and not any(
            type(d) is ast.Name and d.id == "staticmethod" for d in func.decorator_list
        )
        passed: list[tuple[ast.expr, ast.Call]] = []
        for site in self.call_sites(func):
            callee = site.func
            if is_method and type(callee) is ast.Attribute:
                index = position - 1
                callee_name = callee.attr
            elif not is_method and type(callee) is ast.Name:
                index = position
                callee_name = callee.id
            else:
                continue
            if callee_name != func.name:
                continue
            value = argument(site, param.arg, index if index >= 0 else None)
            if value is not None:
                passed.append((value, site))
        return passed

    def list_elements(
        self, name: ast.Name, at: ast.AST
    ) -> tuple[list[tuple[ast.expr, ast.AST]], bool] | None:
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
        if type(binding.value) is not ast.List:
            return None
        items = literal_items(binding.value)
        if items is None:
            return None
        elements: list[tuple[ast.expr, ast.AST]] = [(e, binding.node) for e in items]
        certain = bool(elements)
        scope_node = self.scope_of(binding.node).node
        for use in self.name_nodes_in(scope_node, name.id):
            position = self._order[use]
            if not binding.end < position < self._order[at] or use is name:
                continue
            added = self._list_addition(use)
            if added is None:
                return None
            elements.extend((value, use) for value in added)
            certain = certain or (bool(added) and self.runs_once(use, binding.node))
        return elements, certain

    def _list_addition(self, use: ast.Name) -> list[ast.expr] | None:
        """The values one use of a list name adds to it (``[]`` for a plain read such as
        ``len(xs)``), or None when the use may change the list in unknown ways."""
        parent = self.parent(use)
        if type(parent) is ast.AugAssign and type(parent.op) is ast.Add:
            return literal_items(parent.value)
        if type(parent) is ast.Attribute and parent.value is use:
            return self._method_addition(parent)
        call = self.parent(parent) if type(parent) is ast.keyword else parent
        if type(call) is ast.Call and call.func is not use:
            is_len = type(call.func) is ast.Name and call.func.id == "len"
            return [] if is_len else None
        if (type(parent) is ast.For or type(parent) is ast.AsyncFor) and parent.iter is use:
            return []
        return None

    def _method_addition(self, method: ast.Attribute) -> list[ast.expr] | None:
        call = self.parent(method)
        if type(call) is not ast.Call or call.func is not method:
            return None
        arguments = call_arguments(call)
        if method.attr == "append" and len(arguments) == 1 and not is_unpacked(arguments[0]):
            return [argument_value(arguments[0])]
        if method.attr == "extend" and len(arguments) == 1:
            return literal_items(argument_value(arguments[0]))
        return [] if method.attr in _READING_METHODS else None
