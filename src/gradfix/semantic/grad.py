"""Grad mode (``no_grad`` blocks and functions) and the flow of ``requires_grad``."""

from __future__ import annotations

import ast

from gradfix.semantic.leaves import LeafQueries
from gradfix.semantic.scopes import Binding
from gradfix.semantic.syntax import (
    argument,
    argument_values,
    default_of,
    dotted,
    is_backward_call,
    is_false,
    is_function,
    is_true,
    iterated_source,
)
from gradfix.torch_facts import (
    BACKWARD_FUNCTIONS,
    FACTORIES,
    GRAD_CUTTING_METHODS,
    NO_GRAD_CONTEXTS,
    NON_TENSOR_METHODS,
    NON_TENSOR_TORCH,
    TENSOR_METHODS,
    VIEW_ATTRIBUTES,
)


class GradQueries(LeafQueries):
    #: scope node -> (root, backward call) of the backward calls run in that scope, once
    #: asked
    _backward_roots: dict[ast.AST, list[tuple[ast.expr, ast.Call]]] | None = None

    # -- grad mode ---------------------------------------------------------------------------
    def in_no_grad(self, node: ast.AST) -> bool:
        """``node`` runs with autograd recording off: in ``with torch.no_grad():`` (or
        ``inference_mode``, ``set_grad_enabled(False)``), in a ``@torch.no_grad()``
        function, or in a function only ever called from such places (in this file, or,
        when it has no call site here, in the other files: ``no_grad_callers``)."""
        decider = self._grad_mode_decider(node)
        if decider is None:
            return False
        if type(decider) is ast.With or type(decider) is ast.AsyncWith:
            return not self._with_modes[decider]
        return self._function_in_no_grad(decider)

    def _grad_mode_decider(self, node: ast.AST) -> ast.AST | None:
        """The innermost ancestor of ``node`` that decides its grad mode: a ``with`` that
        sets one, or a function (a lambda). Remembered for every ancestor passed on the
        way up, so the rules asking at most nodes walk each chain once per file (the
        decider is structural; a function's answer is asked of it each time)."""
        deciders = self._grad_deciders
        passed: list[ast.AST] = []
        current = self._parents.get(node)
        decider: ast.AST | None = None
        while current is not None:
            if current in deciders:
                decider = deciders[current]
                break
            kind = type(current)
            if kind is ast.With or kind is ast.AsyncWith:
                mode = self._with_grad_mode(current)  # type: ignore[arg-type]
                if mode is not None:
                    self._with_modes[current] = mode
                    decider = deciders[current] = current
                    break
            elif kind is ast.FunctionDef or kind is ast.AsyncFunctionDef or kind is ast.Lambda:
                decider = deciders[current] = current
                break
            passed.append(current)
            current = self._parents.get(current)
        for ancestor in passed:
            deciders[ancestor] = decider
        return decider

    def _with_grad_mode(self, node: ast.With | ast.AsyncWith) -> bool | None:
        """False when the ``with`` turns grad off, True when it turns it on, else None."""
        for item in node.items:
            call = item.context_expr
            if type(call) is not ast.Call:
                continue
            name = self.call_name(call)
            if name in NO_GRAD_CONTEXTS:
                return is_false(argument(call, "mode", 0))
            if name == "torch.enable_grad":
                return True
            values = argument_values(call)
            if name == "torch.set_grad_enabled" and values:
                if is_false(values[0]):
                    return False
                if is_true(values[0]):
                    return True
        return None

    def _function_in_no_grad(self, func: ast.AST) -> bool:
        if func in self._no_grad_cache:
            return self._no_grad_cache[func]
        self._no_grad_cache[func] = False  # recursion guard
        result = False
        if is_function(func):
            decorators = func.decorator_list  # type: ignore[attr-defined]
            result = any(self._decorator_disables_grad(d) for d in decorators)
            if not result and not any(self._decorator_enables_grad(d) for d in decorators):
                sites = self.call_sites(func)  # type: ignore[attr-defined, arg-type]
                result = bool(sites) and all(self.in_no_grad(site) for site in sites)
                if not sites:  # called from other files, if at all
                    self.open_functions.add(func)
                    result = func.name in self.no_grad_callers  # type: ignore[attr-defined]
        self._no_grad_cache[func] = result
        return result

    def _decorator_disables_grad(self, decorator: ast.expr) -> bool:
        if type(decorator) is ast.Call:
            if self.call_name(decorator) in NO_GRAD_CONTEXTS:
                return not is_false(argument(decorator, "mode", 0))
            return False
        return self.qualified_name(decorator) in NO_GRAD_CONTEXTS

    def _decorator_enables_grad(self, decorator: ast.expr) -> bool:
        target = decorator.func if type(decorator) is ast.Call else decorator
        return self.qualified_name(target) == "torch.enable_grad"

    # -- requires_grad -----------------------------------------------------------------------
    def requires_grad(self, expr: ast.AST, at: ast.AST | None = None, _depth: int = 0) -> bool:
        """``expr`` evaluates to a tensor that requires grad (a leaf or a result of one).

        Follows names to the binding that reaches ``at``, ``self.`` attributes, indexing,
        arithmetic, torch functions, tensor methods, calls of ``nn`` layers, and index
        assignments (``buf[0] = w[0]`` makes ``buf`` require grad).
        """
        if _depth > 12:
            return False
        at = at if at is not None else expr
        # The answer is a function of (expr, at, depth): memoised, call sites that pass
        # arguments to functions that pass them on no longer multiply the work.
        if expr not in self._order or at not in self._order:
            return self._requires_grad(expr, at, _depth)  # nodes built by a rule
        key = (expr, at, _depth)
        if key not in self._requires_grad_memo:
            self._requires_grad_memo[key] = self._requires_grad(expr, at, _depth)
        return self._requires_grad_memo[key]

    def _requires_grad(self, expr: ast.AST, at: ast.AST, depth: int) -> bool:
        if self.leaf_reason(expr, at, depth) is not None:
            return True
        recurse = self.requires_grad
        kind = type(expr)
        if kind is ast.Name:
            return self._name_requires_grad(expr, at, depth)  # type: ignore[arg-type]
        if kind is ast.Attribute:
            if expr.attr in VIEW_ATTRIBUTES:  # type: ignore[attr-defined]
                return recurse(expr.value, at, depth + 1)  # type: ignore[attr-defined]
            return False
        if kind is ast.Subscript:
            return recurse(expr.value, at, depth + 1)  # type: ignore[attr-defined]
        if kind is ast.BinOp:
            return recurse(expr.left, at, depth + 1) or recurse(expr.right, at, depth + 1)  # type: ignore[attr-defined]
        if kind is ast.UnaryOp:
            return recurse(expr.operand, at, depth + 1)  # type: ignore[attr-defined]
        if kind is ast.IfExp:
            return recurse(expr.body, at, depth + 1) or recurse(expr.orelse, at, depth + 1)  # type: ignore[attr-defined]
        if kind is ast.Tuple or kind is ast.List:
            elements = expr.elts  # type: ignore[attr-defined]
            return any(recurse(_unstarred(e), at, depth + 1) for e in elements)
        if kind is ast.Call:
            return self._call_requires_grad(expr, at, depth)  # type: ignore[arg-type]
        return False

    def _name_requires_grad(self, name: ast.Name, at: ast.AST, depth: int) -> bool:
        binding = self.reaching_binding(name, at)
        if binding is None:
            return False
        if binding.kind == "for" and binding.value is not None:
            if self.parameter_iteration(binding.value, binding.unpack_index, depth):
                return True
            source = iterated_source(binding.value, binding.unpack_index)
            if (
                source is not None
                and self.is_tensor(source, binding.node)
                and self.requires_grad(source, binding.node, depth + 1)
            ):
                return True  # ``for row in x``, ``for a, b in zip(x[:-1], x[1:])`` on a tensor
        if binding.kind == "assign" and binding.value is not None and binding.unpack_index is None:
            if self.requires_grad(binding.value, binding.node, depth + 1):
                return True
        unpacked = self.unpacked_call_values(binding) or []
        if any(self.requires_grad(v, ret, depth + 1) for v, ret in unpacked):
            return True
        if binding.kind == "param" and type(binding.node) is ast.arg:
            if self._is_forward_input(binding.node) or self._argument_requires_grad(
                binding.node, depth
            ):
                return True
        # ``buf[i] = value`` after the binding makes ``buf`` part of the graph.
        for stmt, value in self._index_assignments(name.id, binding, at):
            if self.requires_grad(value, stmt, depth + 1):
                return True
        return False

    def _is_forward_input(self, param: ast.arg) -> bool:
        """A tensor argument of ``forward`` of an ``nn.Module`` subclass: an activation."""
        func = self.enclosing_function(param)
        if func is None or func.name != "forward" or not func.args.args:
            return False
        positional = func.args.args
        if param is positional[0] or param not in positional:
            return False
        if default_of(func, param) is not None:
            return False  # *args, keyword-only, defaults: configuration more often than data
        cls = self.method_class(func)
        if cls is None or not any(self.is_module_base(base) for base in cls.bases):
            return False
        return param.annotation is None or self.is_tensor_annotation(param.annotation)

    def is_tensor_annotation(self, annotation: ast.AST) -> bool:
        """``torch.Tensor``, ``torch.FloatTensor``..., or ``Optional[...]`` / ``... | None``
        of one."""
        if type(annotation) is ast.Subscript and dotted(annotation.value).endswith("Optional"):
            return self.is_tensor_annotation(annotation.slice)
        if type(annotation) is ast.BinOp and type(annotation.op) is ast.BitOr:
            sides = [annotation.left, annotation.right]
            others = [s for s in sides if not (type(s) is ast.Constant and s.value is None)]
            return len(others) == 1 and self.is_tensor_annotation(others[0])
        qualified = self.qualified_name(annotation) or ""
        return (
            qualified.startswith("torch.")
            and qualified.endswith("Tensor")
            and "." not in (qualified[len("torch.") :])
        )

    def _argument_requires_grad(self, param: ast.arg, depth: int) -> bool:
        """Some call site of the function in this file passes a tensor that requires grad."""
        return any(
            self.requires_grad(arg, site, depth + 1) for arg, site in self.passed_arguments(param)
        )

    def index_assignments(self, name: ast.Name, at: ast.AST) -> list[tuple[ast.AST, ast.expr]]:
        """``(statement, value)`` of each ``name[i] = value`` between the binding of
        ``name`` that reaches ``at`` and ``at``."""
        binding = self.reaching_binding(name, at)
        return [] if binding is None else self._index_assignments(name.id, binding, at)

    def _index_assignments(
        self, name: str, binding: Binding, at: ast.AST
    ) -> list[tuple[ast.AST, ast.expr]]:
        position = self._order[at]
        return [
            (stmt, value)
            for stmt, value in self._subscript_assigns.get(name, [])
            if binding.end < self._order[stmt] and self._last[stmt] < position
        ]

    def _call_requires_grad(self, call: ast.Call, at: ast.AST, depth: int) -> bool:
        func = call.func
        if self.is_module(func, at):
            return True  # calling a layer or model: ``self.fc(x)``, ``model(x)``
        if self.nn_module_class(func, at) is not None:
            # a parameterless module (``self.act = nn.ReLU()``) is its functional op
            return any(self.requires_grad(a, at, depth + 1) for a in argument_values(call))
        returned = self.returned_values(call, at)
        if returned is not None:
            return any(self.requires_grad(v, ret, depth + 1) for v, ret in returned)
        args = argument_values(call)
        if type(func) is ast.Attribute and self.qualified_name(func) is None:
            method = func.attr
            if method in GRAD_CUTTING_METHODS or method in NON_TENSOR_METHODS:
                return False
            if self.requires_grad(func.value, at, depth + 1):
                return True
            return method in TENSOR_METHODS and any(
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

    # -- evidence from use -------------------------------------------------------------------
    def backpropagated(self, expr: ast.AST, at: ast.AST, *, holding: bool = False) -> bool:
        """``expr`` (a name, ``a.b``, ``a["k"]``) is the root of a ``.backward()``,
        ``torch.autograd.grad`` or ``torch.autograd.backward`` call of ``at``'s scope that
        sees the same binding of its name; with ``holding``, also a container whose item or
        attribute is (``out`` of ``out["loss"].backward()``).

        Evidence from use: such a value requires grad whatever made it (an import,
        ``self(...)``, a parameter, a model returning an object with ``.loss``)."""
        path = access_path(expr)
        base = _path_base(expr)
        if path is None or base is None:
            return False
        binding = self.reaching_binding(base, at)
        if binding is None:
            return False
        for root, call in self.backward_roots(self.scope_of(at).node):
            root_path = access_path(root)
            if root_path is None or root_path[: len(path)] != path:
                continue
            if len(root_path) > len(path) and not holding:
                continue
            root_base = _path_base(root)
            if root_base is not None and self.reaching_binding(root_base, call) is binding:
                return True
        return False

    def leaf_accumulator(self, stmt: ast.AST) -> ast.Call | None:
        """For ``total += loss`` where ``total`` was made by a torch factory with
        ``requires_grad=True`` and ``loss`` requires grad: that factory call.

        Such a leaf is a running total, not a parameter (its ``.grad`` is never read, no
        optimizer steps it): the remedy is to drop ``requires_grad``, never to wrap the
        ``+=`` in ``no_grad`` (that cuts the loss out of the total)."""
        if type(stmt) is not ast.AugAssign or type(stmt.op) not in (ast.Add, ast.Sub):
            return None
        target = stmt.target
        if type(target) is not ast.Name:
            return None
        binding = self.reaching_binding(target, stmt)
        if binding is None or binding.kind != "assign" or binding.unpack_index is not None:
            return None
        factory = binding.value
        if type(factory) is not ast.Call or self.call_name(factory) not in FACTORIES:
            return None
        if not is_true(argument(factory, "requires_grad", None)):
            return None
        if not (self.requires_grad(stmt.value, stmt) or self.backpropagated(stmt.value, stmt)):
            return None
        return None if self._trained_leaf(target, binding) else factory

    def _trained_leaf(self, name: ast.Name, binding: Binding) -> bool:
        """The leaf bound by ``binding`` has its ``.grad`` read, sits in a list or tuple
        (of parameters) or is given to a ``torch.optim`` optimizer."""
        for use in self.name_nodes_in(self.scope_of(name).node, name.id):
            if use is name or self.reaching_binding(use, use) is not binding:
                continue
            parent = self._parents.get(use)
            if type(parent) is ast.keyword:
                parent = self._parents.get(parent)
            if type(parent) is ast.Attribute and parent.attr in ("grad", "data"):
                return True
            if type(parent) is ast.List or type(parent) is ast.Tuple:
                return True
            if type(parent) is ast.Call and parent.func is not use:
                if (self.call_name(parent) or "").startswith("torch.optim."):
                    return True
        return False

    def backward_roots(self, scope: ast.AST) -> list[tuple[ast.expr, ast.Call]]:
        """``(root, call)`` for each backward call evaluated in ``scope`` (``loss`` of
        ``loss.backward()``, each output of ``torch.autograd.grad(outputs, ...)``), in
        order. Found for every scope at the first question, among the calls spelled
        ``backward`` or ``grad`` (or an import's alias of them)."""
        by_scope = self._backward_roots
        if by_scope is None:
            by_scope = self._backward_roots = {}
            spelled = self.calls_that_may_be(BACKWARD_FUNCTIONS)  # ``x.backward()`` too
            for call in sorted(set(spelled), key=self._order.__getitem__):
                for root in self._backward_call_roots(call):
                    by_scope.setdefault(self.scope_of(call).node, []).append((root, call))
        return by_scope.get(scope, [])

    def _backward_call_roots(self, call: ast.Call) -> list[ast.expr]:
        name = self.call_name(call)
        if name in BACKWARD_FUNCTIONS:
            root = argument(call, "outputs", 0) or argument(call, "tensors", 0)
        elif name is None and is_backward_call(call):
            root = call.func.value  # type: ignore[attr-defined]
        else:
            return []
        if type(root) is ast.Tuple or type(root) is ast.List:
            return [_unstarred(e) for e in root.elts]
        return [] if root is None else [root]


def access_path(expr: ast.AST) -> tuple[str, ...] | None:
    """``("out", ".loss", "['k']")`` for ``out.loss['k']``: a name followed by attributes
    and constant subscripts; None for any other expression."""
    if type(expr) is ast.Name:
        return (expr.id,)
    if type(expr) is ast.Attribute:
        inner = access_path(expr.value)
        return None if inner is None else (*inner, "." + expr.attr)
    if type(expr) is ast.Subscript and type(expr.slice) is ast.Constant:
        inner = access_path(expr.value)
        return None if inner is None else (*inner, f"[{expr.slice.value!r}]")
    return None


def _path_base(expr: ast.AST) -> ast.Name | None:
    """The name an access path starts from."""
    while type(expr) is ast.Attribute or type(expr) is ast.Subscript:
        expr = expr.value  # type: ignore[attr-defined]
    return expr if type(expr) is ast.Name else None


def _unstarred(element: ast.expr) -> ast.expr:
    """``x`` for the ``*x`` of a list/tuple literal (LibCST's ``element.value``)."""
    return element.value if type(element) is ast.Starred else element
