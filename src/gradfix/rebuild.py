"""Rebuilding a tensor out of place instead of writing into it (GF202, GF203).

``p[k] = f(p)`` and ``for i in range(n): x[i] = g(x[i])`` write into a tensor whose own
views an op of the right-hand side saved for backward. Both rules ask the same questions:
does the right-hand side save a view of the tensor (:class:`SelfReads`), and may the write
be replaced by rebinding the name to a new tensor (:func:`rebindable`, :func:`may_alias`)?
"""

from __future__ import annotations

import libcst as cst

from gradfix.analysis import (
    SAVES_DIVISOR,
    SAVES_INPUTS,
    SAVES_OTHER_OPERANDS,
    SAVES_OUTPUT,
    VIEW_ATTRIBUTES,
    Binding,
    FileAnalysis,
    VariableNames,
)
from gradfix.torch_facts import FACTORIES, MAY_ALIAS_OPS, VIEW_OPS
from gradfix.walk import walk

#: Elementwise ops: the result has the broadcast shape of the operands (0-d tensors and
#: numbers give a 0-d tensor; 1-D tensors a 1-D tensor of the broadcast length).
POINTWISE_OPS = frozenset(
    "add sub mul div pow neg log log2 log10 log1p exp exp2 expm1 sin cos tan asin acos atan "
    "sinh cosh tanh asinh acosh atanh sigmoid sqrt rsqrt reciprocal abs square erf erfc "
    "lgamma digamma atan2 hypot maximum minimum clamp clip softplus relu gelu silu clone".split()
)
#: Producers of a fresh tensor: rebinding the name to a new tensor changes nothing else.
FRESH_OPS = (SAVES_INPUTS | SAVES_OUTPUT | SAVES_OTHER_OPERANDS | SAVES_DIVISOR) | frozenset(
    "add sub neg sum mean cumsum clone cat concat stack hstack vstack where flip roll repeat "
    "tile".split()
)


class SelfReads:
    """Reads of tensor ``name`` (as bound by ``binding``) inside a right-hand side.

    ``integer_names`` are names known to hold Python integers (a ``range`` loop variable):
    indexing with them returns a view, as with an integer literal.
    """

    def __init__(
        self,
        analysis: FileAnalysis,
        name: str,
        binding: Binding,
        integer_names: frozenset[str] = frozenset(),
    ) -> None:
        self.analysis = analysis
        self.name = name
        self.binding = binding
        self.integer_names = integer_names

    def saved_in(self, expr: cst.BaseExpression) -> bool:
        """Some op on the graph path of ``expr`` saves a view of the tensor for backward."""
        if self.is_view(expr):
            return False  # a read; whether it is saved depends on the op around it
        if isinstance(expr, cst.Subscript) or (
            isinstance(expr, cst.Attribute) and expr.attr.value in VIEW_ATTRIBUTES
        ):
            return self.saved_in(expr.value)  # a view of an intermediate result
        op = self.analysis.tensor_op(expr, expr)
        saved = self.analysis.saved_operands(expr, expr)
        if op is None or saved is None or op[0] == "detach":
            return False  # unknown op, or the graph is cut here
        if any(self.is_view(o) for o in saved):
            return True
        return any(self.saved_in(o) for o in op[1])

    def is_view(self, expr: cst.BaseExpression, depth: int = 0) -> bool:
        """``expr`` shares storage and version counter with the tensor."""
        if depth > 8:
            return False
        if isinstance(expr, cst.Name):
            return self._is_self_or_alias(expr, depth)
        if isinstance(expr, cst.Subscript):
            return all(self._is_view_index(e) for e in expr.slice) and self.is_view(
                expr.value, depth + 1
            )
        if isinstance(expr, cst.Attribute):
            return expr.attr.value in VIEW_ATTRIBUTES and self.is_view(expr.value, depth + 1)
        op = self.analysis.tensor_op(expr, expr)
        return (
            op is not None
            and op[0] in VIEW_OPS
            and bool(op[1])
            and (self.is_view(op[1][0], depth + 1))
        )

    def _is_view_index(self, element: cst.SubscriptElement) -> bool:
        item = element.slice
        if isinstance(item, cst.Index) and isinstance(item.value, cst.Name):
            if item.value.value in self.integer_names:
                return True
        return is_basic_index(element)

    def _is_self_or_alias(self, name: cst.Name, depth: int) -> bool:
        binding = self.analysis.reaching_binding(name, name)
        if binding is None:
            return False
        if name.value == self.name and binding is self.binding:
            return True
        # ``r1 = p[0]`` earlier: ``r1`` is a view of ``p``
        if binding.kind != "assign" or binding.value is None or binding.unpack_index is not None:
            return False
        return self._bound_view(binding.value, binding.node, depth + 1)

    def _bound_view(self, value: cst.BaseExpression, at: cst.CSTNode, depth: int) -> bool:
        names = [n for n in names_in(value) if n.value == self.name]
        same = all(self.analysis.reaching_binding(n, at) is self.binding for n in names)
        return bool(names) and same and self.is_view(value, depth)


class _NameCollector(VariableNames):
    def visit_Name(self, node: cst.Name) -> None:
        if node.value != "None":
            self.names.append(node)

    def visit_Param(self, node: cst.Param) -> bool:
        return False


def assigned_value(
    analysis: FileAnalysis, name: cst.Name, at: cst.CSTNode
) -> tuple[cst.BaseExpression, cst.CSTNode] | None:
    """The value of the plain ``name = value`` that reaches ``at`` (not an unpacking, a
    parameter or a loop variable), and the statement that binds it."""
    binding = analysis.reaching_binding(name, at)
    if binding is None or binding.kind != "assign" or binding.value is None:
        return None
    if binding.unpack_index is not None:
        return None
    return binding.value, binding.node


def names_in(node: cst.CSTNode) -> list[cst.Name]:
    collector = _NameCollector()
    walk(node, collector)
    return collector.names


def is_basic_index(element: cst.SubscriptElement) -> bool:
    """Integer, slice, ``...`` or ``None``: indexing that returns a view."""
    item = element.slice
    if not isinstance(item, cst.Index):
        return isinstance(item, cst.Slice)
    value = item.value
    if isinstance(value, cst.Ellipsis) or (isinstance(value, cst.Name) and value.value == "None"):
        return True
    return integer_index(item) is not None


def integer_index(item: cst.BaseSlice) -> int | None:
    """``[2]`` -> 2, ``[-1]`` -> -1; None for any other index."""
    if not isinstance(item, cst.Index):
        return None
    value = item.value
    if isinstance(value, cst.Integer):
        return int(value.evaluated_value)
    if (
        isinstance(value, cst.UnaryOperation)
        and isinstance(value.operator, cst.Minus)
        and isinstance(value.expression, cst.Integer)
    ):
        return -int(value.expression.evaluated_value)
    return None


# -- when rebinding is the same as writing in place ------------------------------------------
def rebindable(analysis: FileAnalysis, node: cst.CSTNode, binding: Binding) -> bool:
    """``p = <new tensor>`` at ``node`` replaces the write: ``p`` is a fresh tensor bound
    in the same scope, on every path to ``node``."""
    if binding.kind != "assign" or binding.value is None or binding.unpack_index is not None:
        return False
    if analysis.scope_of(binding.node).node is not analysis.scope_of(node).node:
        return False  # assigning would make the name local to the inner scope
    line = analysis.parent(binding.node)
    block = analysis.parent(line) if line is not None else None
    if block is None or not analysis.contains(block, node):
        return False  # bound in a branch that may not run
    return is_fresh(analysis, binding.value, binding.node)


def is_fresh(analysis: FileAnalysis, value: cst.BaseExpression, at: cst.CSTNode) -> bool:
    """``value`` makes a new tensor (not a view or an alias of another one)."""
    if isinstance(value, (cst.BinaryOperation, cst.UnaryOperation)):
        return analysis.tensor_op(value, at) is not None
    if not isinstance(value, cst.Call):
        return False
    if analysis.call_name(value) in FACTORIES:
        return True
    if analysis.is_nn_layer(value.func, at):
        return True
    op = analysis.tensor_op(value, at)
    return op is not None and op[0] in FRESH_OPS and op[0] not in MAY_ALIAS_OPS


def may_alias(analysis: FileAnalysis, node: cst.CSTNode, name: str, binding: Binding) -> bool:
    """Something besides the name may hold the tensor: an alias made between the binding
    and ``node``, or a loop around ``node`` that carries the tensor to the next iteration."""
    for loop in analysis.ancestors(node):
        if isinstance(loop, (cst.For, cst.While)) and not analysis.contains(loop, binding.node):
            return True
    scope = analysis.scope_of(node).node
    start, end = binding.end, analysis.index(node)
    for read in names_in(scope):
        if read.value != name or not start < analysis.index(read) < end:
            continue
        if not _in_fill(analysis, read, name):
            return True
    return False


def _in_fill(analysis: FileAnalysis, read: cst.Name, name: str) -> bool:
    """``read`` is inside a statement ``name[...] = value`` (filling the tensor)."""
    statement = analysis.enclosing_statement(read)
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return False
    assign = statement.body[0]
    if not isinstance(assign, cst.Assign) or len(assign.targets) != 1:
        return False
    target = assign.targets[0].target
    return (
        isinstance(target, cst.Subscript)
        and isinstance(target.value, cst.Name)
        and target.value.value == name
    )
