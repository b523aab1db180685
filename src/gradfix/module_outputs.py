"""What calling a module returns, as the op that made it: a module call has the
semantics of its functional op.

``self.act = nn.ReLU()`` then ``self.act(h)`` is ``relu(h)``; an ``nn.Sequential`` returns
what its last layer returns; an ``nn.Module`` subclass of the file returns what its
``forward`` returns (``return self.act(self.bn(self.conv(x)))``). GF204 asks whether that
op saved its result for backward (changing the result in place then breaks backward).
"""

from __future__ import annotations

import ast

from gradfix.semantic import SAVES_OUTPUT, Semantic, argument, is_true
from gradfix.semantic.syntax import default_of, iterated_source

#: ``nn`` modules that save their output for backward, by the op they apply.
OUTPUT_SAVING_MODULES = {
    "Sigmoid": "sigmoid", "Tanh": "tanh", "ReLU": "relu", "Softmax": "softmax",
    "LogSoftmax": "log_softmax", "Softmin": "softmin",
}  # fmt: skip
#: How deep module classes, layers and bindings are followed.
_MAX_DEPTH = 8


def module_output_op(analysis: Semantic, func: ast.expr, at: ast.AST) -> str | None:
    """The output-saving op (``"relu"``) whose result calling the module ``func`` gives:
    ``self.act``, ``nn.Sigmoid()``, ``self.block`` (an ``nn.Sequential`` or a module class
    of this file); None when unknown or when that op does not save its result. An op
    applied in place (``nn.ReLU(inplace=True)``) ends with ``_``: the result is then the
    tensor the module was given, not a fresh one."""
    return _Follower(analysis).called(func, at, None, 0)


def module_forwards(analysis: Semantic, func: ast.expr, at: ast.AST) -> list[ast.FunctionDef]:
    """The ``forward`` methods calling the module ``func`` may run: those of the module
    classes of this file it is built from (``[]`` when any is unknown)."""
    follower = _Follower(analysis)
    forwards = []
    for value, _ in follower._module_values(func, at):
        forward = follower._forward_of(value.func) if type(value) is ast.Call else None
        if forward is None:
            return []
        forwards.append(forward)
    return forwards


def function_value_op(analysis: Semantic, func: ast.expr, at: ast.AST) -> str | None:
    """The torch op a function object held by a name or a ``self.`` attribute applies:
    ``self.act = F.relu``, or ``self.activation = _get_activation_fn("relu")`` (a function
    of this file returning torch functions, the one chosen by the literal it is passed).
    None when unknown or when the candidates differ."""
    if type(func) is ast.Name:
        binding = analysis.reaching_binding(func, at)
        ok = binding is not None and binding.kind == "assign" and binding.unpack_index is None
        values = [(binding.value, binding.node)] if ok and binding.value is not None else []  # type: ignore[union-attr]
    elif type(func) is ast.Attribute and analysis.is_self(func.value, at):
        values = [(v, b.node) for v, b in analysis.self_attribute_values(func, at)]
    else:
        return None
    return (
        _agreed(_function_op(analysis, value, node) for value, node in values) if values else None
    )


def _function_op(analysis: Semantic, value: ast.expr, at: ast.AST) -> str | None:
    if type(value) is ast.Call:
        chosen = _chosen_returns(analysis, value)
        return _agreed(_torch_function(analysis, v) for v in chosen) if chosen else None
    return _torch_function(analysis, value)


def _torch_function(analysis: Semantic, expr: ast.expr) -> str | None:
    """``relu`` for ``F.relu`` / ``torch.relu`` / ``torch.nn.functional.relu``."""
    name = analysis.qualified_name(expr) or ""
    head, _, short = name.rpartition(".")
    return short if head in ("torch", "torch.nn.functional", "torch.special") else None


def _chosen_returns(analysis: Semantic, call: ast.Call) -> list[ast.expr]:
    """What ``call`` of a function of this file may return, leaving out the ``return``s
    under ``if name == "literal":`` tests the literal ``call`` passes for ``name`` fails."""
    function = analysis.local_function(call.func, call)
    returned = analysis.returned_values(call, call) if function is not None else None
    if function is None or not returned:
        return []
    passed = {
        param.arg: argument(call, param.arg, position) or default_of(function, param)
        for position, param in enumerate(function.args.args)
    }
    chosen = []
    for value, ret in returned:
        if all(
            _branch_may_run(analysis, ret, test, passed)
            for test in _tests_above(analysis, ret, function)
        ):
            chosen.append(value)
    return chosen


def _tests_above(
    analysis: Semantic, node: ast.AST, function: ast.FunctionDef
) -> list[tuple[ast.expr, bool]]:
    """The tests of the ``if`` statements of ``function`` around ``node``, each with
    whether ``node`` is in its body (True) or its ``else`` (False)."""
    tests = []
    child = node
    for ancestor in analysis.ancestors(node):
        if ancestor is function:
            break
        if type(ancestor) is ast.If:
            tests.append((ancestor.test, any(child is s for s in ancestor.body)))
        child = ancestor
    return tests


def _branch_may_run(
    analysis: Semantic,
    ret: ast.AST,
    test: tuple[ast.expr, bool],
    passed: dict[str, ast.expr | None],
) -> bool:
    """False only when the test is ``param == "literal"`` and the call's literal for
    ``param`` decides it against the branch ``ret`` is in."""
    condition, in_body = test
    if type(condition) is not ast.Compare or len(condition.ops) != 1:
        return True
    left, right = condition.left, condition.comparators[0]
    if type(right) is ast.Name:
        left, right = right, left
    if type(left) is not ast.Name or type(right) is not ast.Constant:
        return True
    given = passed.get(left.id)
    if type(given) is not ast.Constant or type(condition.ops[0]) not in (ast.Eq, ast.NotEq):
        return True
    equal = given.value == right.value
    holds = equal if type(condition.ops[0]) is ast.Eq else not equal
    return holds == in_body


class _Follower:
    def __init__(self, analysis: Semantic) -> None:
        self.analysis = analysis

    def called(
        self, func: ast.expr, at: ast.AST, instance: ast.Call | None, depth: int
    ) -> str | None:
        """The op calling the module object ``func`` (evaluated at ``at``) applies last;
        ``instance`` builds the object whose ``__init__`` ``func`` is read in."""
        if depth > _MAX_DEPTH:
            return None
        return _agreed(
            self.constructed(value, node, instance, depth + 1)
            for value, node in self._module_values(func, at)
        )

    def _module_values(self, func: ast.expr, at: ast.AST) -> list[tuple[ast.expr, ast.AST]]:
        """The expressions that built the module ``func`` holds, where they were built."""
        analysis = self.analysis
        if type(func) is ast.Call:
            return [(func, at)]
        if type(func) is ast.Name:
            binding = analysis.reaching_binding(func, at)
            if binding is None or binding.value is None:
                return []
            if binding.kind == "for":  # ``for layer in self.layers``
                source = iterated_source(binding.value, binding.unpack_index)
                return self._elements(source, binding.node) if source is not None else []
            if binding.kind != "assign" or binding.unpack_index is not None:
                return []
            return [(binding.value, binding.node)]
        if type(func) is ast.Subscript:  # ``self.layers[i]``
            return self._elements(func.value, at)
        if type(func) is ast.Attribute:
            return [(value, b.node) for value, b in analysis.self_attribute_values(func, at)]
        return []

    def _elements(self, container: ast.expr, at: ast.AST) -> list[tuple[ast.expr, ast.AST]]:
        """The modules an ``nn.ModuleList`` / ``nn.Sequential`` held by ``self.<name>``
        holds: the elements it is built with and those ``self.<name>.append(...)`` adds."""
        analysis = self.analysis
        if type(container) is not ast.Attribute or not analysis.is_self(container.value, at):
            return []
        found: list[tuple[ast.expr, ast.AST]] = []
        for value, binding in analysis.self_attribute_values(container, at):
            name = analysis.call_name(value) if type(value) is ast.Call else None
            if name not in ("torch.nn.ModuleList", "torch.nn.Sequential"):
                return []
            assert isinstance(value, ast.Call)
            for argument_ in value.args:
                found += _displayed(argument_, binding.node)
        cls = analysis.enclosing_class(at)
        for attr in analysis._attributes.get("append", []):
            call = analysis.parent(attr)
            target = attr.value  # type: ignore[attr-defined]
            if type(call) is not ast.Call or call.func is not attr or len(call.args) != 1:
                continue
            if type(target) is ast.Attribute and target.attr == container.attr:
                if analysis.enclosing_class(call) is cls and analysis.is_self(target.value, call):
                    found.append((call.args[0], call))
        return found

    def constructed(
        self, value: ast.expr, at: ast.AST, instance: ast.Call | None, depth: int
    ) -> str | None:
        """The op the module built by ``value`` applies last."""
        if type(value) is not ast.Call:
            return None
        cls = self._class_expression(value.func, at, instance)
        if cls is None:
            return None
        name = self.analysis.qualified_name(cls) or ""
        if name.startswith("torch.nn."):
            return self._nn_module_op(name.rpartition(".")[2], value, depth)
        return self._forward_op(cls, value, depth)

    def _class_expression(
        self, func: ast.expr, at: ast.AST, instance: ast.Call | None
    ) -> ast.expr | None:
        """The class ``func`` names: itself, or the value a dict of classes holds for the
        key (``ACTIVATIONS[name]()`` with ``name`` an argument of ``__init__``)."""
        if type(func) is not ast.Subscript:
            return func
        table = func.value
        binding = self.analysis.reaching_binding(table, table) if type(table) is ast.Name else None
        if binding is None or type(binding.value) is not ast.Dict:
            return None
        key = self._constant(func.slice, at, instance)
        if key is None:
            return None
        for entry, cls in zip(binding.value.keys, binding.value.values):
            if type(entry) is ast.Constant and entry.value == key.value:
                return cls
        return None

    def _constant(
        self, expr: ast.expr, at: ast.AST, instance: ast.Call | None
    ) -> ast.Constant | None:
        """``expr`` as a constant: a literal, or a parameter of ``__init__`` with what
        ``instance`` passes for it (its default when nothing is passed)."""
        if type(expr) is ast.Constant:
            return expr
        if type(expr) is not ast.Name:
            return None
        binding = self.analysis.reaching_binding(expr, at)
        if binding is None or binding.kind != "param" or type(binding.node) is not ast.arg:
            return None
        func = self.analysis.enclosing_function(binding.node)
        if func is None or func.name != "__init__" or binding.node not in func.args.args:
            return None
        position = func.args.args.index(binding.node) - 1  # after ``self``
        passed = argument(instance, binding.name, position) if instance is not None else None
        value = passed if passed is not None else default_of(func, binding.node)
        return value if type(value) is ast.Constant else None

    def _nn_module_op(self, short: str, value: ast.Call, depth: int) -> str | None:
        if short != "Sequential":
            op = OUTPUT_SAVING_MODULES.get(short)
            flag = argument(value, "inplace", 0 if short == "ReLU" else None)
            return f"{op}_" if op is not None and is_true(flag) else op
        layers = [a for a in value.args if type(a) is not ast.Starred]
        return self.called(layers[-1], value, None, depth) if layers else None

    def _forward_op(self, cls: ast.expr, value: ast.Call, depth: int) -> str | None:
        """What the ``forward`` of the module class ``cls`` of this file returns."""
        forward = self._forward_of(cls)
        returns = self.analysis._returns.get(forward, []) if forward is not None else []
        return _agreed(self.returned(ret.value, ret, value, depth) for ret in returns)

    def _forward_of(self, cls: ast.expr) -> ast.FunctionDef | None:
        if type(cls) is not ast.Name:
            return None
        bindings = self.analysis.bindings(cls)
        if len(bindings) != 1 or type(bindings[0].node) is not ast.ClassDef:
            return None
        methods = [
            node
            for node in bindings[0].node.body
            if type(node) is ast.FunctionDef and node.name == "forward"
        ]
        return methods[0] if len(methods) == 1 else None

    def returned(
        self, value: ast.expr | None, at: ast.AST, instance: ast.Call, depth: int
    ) -> str | None:
        """The op that made ``value`` in ``forward`` when it saves its result."""
        if value is None or depth > _MAX_DEPTH:
            return None
        if type(value) is ast.Name:
            binding = self.analysis.reaching_binding(value, at)
            if binding is None or binding.kind != "assign" or binding.unpack_index is not None:
                return None
            return self.returned(binding.value, binding.node, instance, depth + 1)
        if type(value) is not ast.Call:
            return None
        func = value.func
        if type(func) is ast.Attribute and self.analysis.is_self(func.value, at):
            return self.called(func, at, instance, depth + 1)
        op = self.analysis.tensor_op(value, at)  # ``return torch.sigmoid(h)``
        return op[0] if op is not None and op[0] in SAVES_OUTPUT else None


def _displayed(expr: ast.expr, at: ast.AST) -> list[tuple[ast.expr, ast.AST]]:
    """The elements a list display or comprehension shows (``[a, b]``, ``[f(i) for i in
    ...]``: the element expression), or ``expr`` itself when it is a single module."""
    if type(expr) is ast.List or type(expr) is ast.Tuple:
        return [(e, at) for e in expr.elts if type(e) is not ast.Starred]
    if type(expr) is ast.ListComp or type(expr) is ast.GeneratorExp:
        return [(expr.elt, expr.elt)]
    return [(expr, at)] if type(expr) is ast.Call else []


def _agreed(ops: object) -> str | None:
    """The one op all paths give; None when a path gives none or they differ."""
    found = set(ops)  # type: ignore[call-overload]
    return found.pop() if len(found) == 1 and None not in found else None
