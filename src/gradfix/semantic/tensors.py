"""Which expressions are tensors, which op they apply and what backward keeps of it."""

from __future__ import annotations

import ast

from gradfix.semantic.grad import GradQueries
from gradfix.semantic.syntax import (
    argument_values,
    call_arguments,
    flatten_operands,
    is_int_literal,
    subscript_indices,
)
from gradfix.semantic.tables import BINARY_OPS, UNARY_OPS
from gradfix.torch_facts import (
    ELEMENTWISE,
    FACTORIES,
    OP_NAMESPACES,
    OPS,
    REDUCTIONS,
    SAVED_BY_HAND,
    SAVED_WITH_A_NUMBER,
    SAVES_DIVISOR,
    SAVES_INPUTS,
    SAVES_NOTHING,
    SAVES_OTHER_OPERANDS,
    SAVES_OUTPUT,
    TENSOR_OPS,
    VIEW_ATTRIBUTES,
    VIEW_OPS,
    saved_for_backward,
)

#: How the generated facts name an op's first two tensor operands.
OPERAND_LABELS = ("self", "other")


class TensorQueries(GradQueries):
    # -- what backward keeps -----------------------------------------------------------------
    def tensor_op(
        self, expr: ast.AST, at: ast.AST | None = None, _depth: int = 0
    ) -> tuple[str, list[ast.expr]] | None:
        """The torch op ``expr`` applies and its operands, or None.

        ``a / b`` -> ``("div", [a, b])``; ``torch.log(x)`` and ``x.log()`` -> ``("log", [x])``;
        list/tuple arguments are flattened (``torch.stack([a, b])`` -> ``[a, b]``). A method
        counts only on a receiver shown to be a tensor; user functions are None.
        """
        at = at if at is not None else expr
        if type(expr) is ast.BinOp:
            name = BINARY_OPS.get(type(expr.op))
            return (name, [expr.left, expr.right]) if name else None
        if type(expr) is ast.UnaryOp:
            name = UNARY_OPS.get(type(expr.op))
            return (name, [expr.operand]) if name else None
        if type(expr) is not ast.Call:
            return None
        operands = flatten_operands(expr)
        qualified = self.call_name(expr)
        if qualified is not None:
            for namespace in OP_NAMESPACES:
                short = qualified[len(namespace) :]
                if qualified.startswith(namespace) and "." not in short:
                    return short, operands
            return None
        func = expr.func
        # the receiver's depth goes on from the caller's: ``self.m = self.m.to(d)`` asks
        # whether ``self.m`` is a tensor while answering the same question
        if type(func) is ast.Attribute and self.is_tensor(func.value, at, _depth + 1):
            return func.attr, [func.value, *operands]
        return None

    def saved_operands(self, expr: ast.AST, at: ast.AST | None = None) -> list[ast.expr] | None:
        """The operands of ``expr`` that autograd saves for backward, assuming the op is
        recorded (grad mode on, some operand requires grad).

        ``p[0] / p[1]`` -> both; ``p[0] / 2`` and ``p[0] + p[1]`` -> ``[]``; a Python number
        is never in the answer (no tensor of it is saved). None when ``expr`` is not an op of
        the tables: callers must then assume nothing.
        """
        op = self.tensor_op(expr, at)
        if op is None:
            return None
        name, operands = op
        at = at if at is not None else expr
        labels = self._saved_labels(name, operands, at)
        saved = (
            self._saved_by_hand(name, operands, at)
            if labels is None
            else [o for label, o in zip(OPERAND_LABELS, operands) if label in labels]
        )
        return None if saved is None else [o for o in saved if not self._is_number(o, at)]

    def saves_output(self, expr: ast.AST, at: ast.AST | None = None) -> bool:
        """``expr`` is an op that saves its result (``torch.sigmoid(x)``, ``h.exp()``...)."""
        op = self.tensor_op(expr, at)
        if op is None:
            return False
        name, operands = op
        labels = self._saved_labels(name, operands, at if at is not None else expr)
        return "result" in labels if labels is not None else name in SAVES_OUTPUT

    def _saved_labels(
        self, name: str, operands: list[ast.expr], at: ast.AST
    ) -> frozenset[str] | None:
        """What the generated facts say ``name`` saves (``self``, ``other``, ``result``),
        whichever of its operands that are not known to require grad do; None when they do
        not tell (an op outside the tables, or one of :data:`SAVED_BY_HAND`, or more tensor
        operands than the generator passed)."""
        # only the ops of the hand families: elsewhere the generator's first two tensor
        # arguments need not be the first two operands (``index_select(x, 0, idx)``)
        saves = OPS.get(name, {}).get("saves") if name in TENSOR_OPS else None
        if not saves or name in SAVED_BY_HAND:
            return None
        arity = 2 if any("other" in key for key in saves) else 1
        if len(operands) > arity and any(not self._is_number(o, at) for o in operands[arity:]):
            return None  # ``clamp(x, lo, hi)`` with tensor bounds: the generator passed none
        numbers = [label for label, o in zip(OPERAND_LABELS, operands) if self._is_number(o, at)]
        if len(numbers) == 1 and (name, numbers[0]) in SAVED_WITH_A_NUMBER:
            return SAVED_WITH_A_NUMBER[name, numbers[0]]
        requiring = {
            label for label, o in zip(OPERAND_LABELS, operands[:arity]) if self.requires_grad(o, at)
        }
        # what is saved whichever of the others require grad: a rule reports only what is
        # saved for sure (``x * c`` saves ``x`` only when ``c`` requires grad)
        possible = [key.split(",") for key in saves]
        keys = [k for k in possible if requiring <= set(k) and not set(numbers) & set(k)]
        if not keys:
            return frozenset()
        return frozenset.intersection(*(saved_for_backward(name, k) for k in keys))

    def _is_number(self, expr: ast.expr, at: ast.AST) -> bool:
        return self.element_shape(expr, at) == "number"

    def _saved_by_hand(
        self, name: str, operands: list[ast.expr], at: ast.AST
    ) -> list[ast.expr] | None:
        """The hand families' answer, for the ops the generated facts do not tell."""
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

    # -- tensors -----------------------------------------------------------------------------
    def is_tensor(self, expr: ast.AST, at: ast.AST | None = None, _depth: int = 0) -> bool:
        """``expr`` provably evaluates to one ``torch.Tensor`` (False when unsure).

        Follows names to their reaching binding and ``self.`` attributes to ``__init__``;
        knows torch factories and the ops of the ``SAVES_*`` tables, indexing, arithmetic,
        calls of ``nn`` layers. A list of tensors, a dict, a NumPy array are not tensors.
        """
        if _depth > 12:
            return False
        at = at if at is not None else expr
        key = (expr, at)
        if key in self._is_tensor_asked:
            return False  # a value defined through itself (``self.m = self.m.to(d)``)
        self._is_tensor_asked.add(key)
        try:
            return self._is_tensor(expr, at, _depth)
        finally:
            self._is_tensor_asked.discard(key)

    def _is_tensor(self, expr: ast.AST, at: ast.AST, depth: int) -> bool:
        if self.leaf_reason(expr, at, depth) is not None:
            return True
        if type(expr) is ast.Name:
            return self._name_is_tensor(expr, at, depth)
        if type(expr) is ast.Attribute:
            if expr.attr in VIEW_ATTRIBUTES or expr.attr == "data":
                return self.is_tensor(expr.value, at, depth + 1)
            values = self.self_attribute_values(expr, at)
            return bool(values) and all(self.is_tensor(v, b.node, depth + 1) for v, b in values)
        if type(expr) is ast.Subscript:
            return self.is_tensor(expr.value, at, depth + 1)
        if type(expr) is ast.BinOp:
            if type(expr.op) not in BINARY_OPS:
                return False
            return self.is_tensor(expr.left, at, depth + 1) or self.is_tensor(
                expr.right, at, depth + 1
            )
        if type(expr) is ast.UnaryOp:
            return type(expr.op) in UNARY_OPS and self.is_tensor(expr.operand, at, depth + 1)
        if type(expr) is ast.Call:
            if self.call_name(expr) in FACTORIES or self.is_module(expr.func, at):
                return True
            op = self.tensor_op(expr, at, depth)
            if op is not None:
                return op[0] in TENSOR_OPS
            returned = self.returned_values(expr, at)
            return bool(returned) and all(
                self.is_tensor(v, ret, depth + 1) for v, ret in returned or []
            )
        return False

    def _name_is_tensor(self, expr: ast.Name, at: ast.AST, depth: int) -> bool:
        binding = self.reaching_binding(expr, at)
        if binding is None:
            return False
        if binding.unpack_index is not None:
            unpacked = self.unpacked_call_values(binding)
            return bool(unpacked) and all(
                self.is_tensor(v, ret, depth + 1) for v, ret in unpacked or []
            )
        if binding.kind == "param" and type(binding.node) is ast.arg:
            if self._is_forward_input(binding.node):
                return True  # the activation ``forward`` receives
        if binding.kind == "param" and binding.annotation is not None:
            return self.is_torch_name(binding.annotation, "torch.Tensor")
        if binding.kind == "param" and type(binding.node) is ast.arg:
            passed = self.passed_arguments(binding.node)
            return bool(passed) and all(
                self.is_tensor(arg, site, depth + 1) for arg, site in passed
            )
        value = binding.value
        return (
            binding.kind == "assign"
            and value is not None
            and self.is_tensor(value, binding.node, depth + 1)
        )

    # -- shapes ------------------------------------------------------------------------------
    def element_shape(
        self, expr: ast.AST, at: ast.AST | None = None, _depth: int = 0
    ) -> str | None:
        """'scalar' for a 0-d tensor, 'piece' for a 1-element slice (``w[0:1] * 2``),
        'number' for a Python number, None when unknown. Follows names and elementwise ops."""
        if _depth > 8:
            return None
        at = at if at is not None else expr
        shape = self.element_shape
        if type(expr) is ast.Constant and type(expr.value) in (int, float):
            return "number"
        if type(expr) is ast.UnaryOp:
            return shape(expr.operand, at, _depth + 1)
        if type(expr) is ast.Subscript:
            indices = subscript_indices(expr)
            if any(type(i) is ast.Slice for i in indices):
                return "piece"
            if indices and all(_is_plain_index(i) for i in indices):
                return "scalar"
            return None
        if type(expr) is ast.BinOp:
            kinds = {shape(expr.left, at, _depth + 1), shape(expr.right, at, _depth + 1)}
            kinds.discard("number")
            if kinds <= {"scalar"}:
                return "scalar" if kinds else "number"
            return "piece" if kinds == {"piece"} or kinds == {"piece", "scalar"} else None
        if type(expr) is ast.Name:
            binding = self.reaching_binding(expr, at)
            if binding and binding.kind == "assign" and binding.value is not None:
                if binding.unpack_index is None:
                    return shape(binding.value, binding.node, _depth + 1)
            return None
        if type(expr) is ast.Call:
            return self._call_shape(expr, at, _depth)
        return None

    def _call_shape(self, call: ast.Call, at: ast.AST, depth: int) -> str | None:
        func = call.func
        name = self.call_name(call)
        arguments = call_arguments(call)
        if name is None and type(func) is ast.Attribute:
            method = func.attr
            if method in REDUCTIONS and not arguments:
                return "scalar"
            if method in ELEMENTWISE:
                return self.element_shape(func.value, at, depth + 1)
            return None
        if name is None or not arguments:
            return None
        keywords = {k.arg for k in call.keywords if k.arg is not None}
        short = name.rpartition(".")[2]
        is_loss = name.startswith("torch.nn.functional.") and short.endswith("_loss")
        reduces_all = (short in REDUCTIONS and len(arguments) == 1) or is_loss
        if reduces_all and not ({"reduction", "dim"} & keywords):
            return "scalar"
        if short in ELEMENTWISE:
            return self.element_shape(argument_values(call)[0], at, depth + 1)
        return None


def _is_plain_index(index: ast.expr) -> bool:
    """``x[0]``, ``x[i]`` (LibCST saw ``True``/``None`` as names too)."""
    if type(index) is ast.Name or is_int_literal(index):
        return True
    return type(index) is ast.Constant and (index.value is None or type(index.value) is bool)
