"""Rebuilding a tensor out of place instead of writing into it (GF202, GF203).

``p[k] = f(p)`` and ``for i in range(n): x[i] = g(x[i])`` write into a tensor whose own
views an op of the right-hand side saved for backward. Both rules ask the same questions:
does the right-hand side save a view of the tensor (:class:`SelfReads`), and may the write
be replaced by rebinding the name to a new tensor (:func:`rebindable`, :func:`may_alias`)?
All of it decides on Python's ``ast`` (:class:`gradfix.semantic.Semantic`).
"""

from __future__ import annotations

import ast
import re

from gradfix import pyast
from gradfix.semantic import (
    SAVES_DIVISOR,
    SAVES_INPUTS,
    SAVES_OTHER_OPERANDS,
    SAVES_OUTPUT,
    VIEW_ATTRIBUTES,
    Binding,
    Semantic,
    VariableNames,
)
from gradfix.torch_facts import FACTORIES, MAY_ALIAS_OPS, VIEW_OPS

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
#: Line ends as ``ast`` counts lines (``str.splitlines`` also splits at a form feed).
_LINE_END = re.compile(r"\r\n|\r|\n")
#: The blocks of a compound statement (``If.body``, ``If.orelse``...).
_BLOCK_FIELDS = ("body", "orelse", "finalbody")


class SelfReads:
    """Reads of tensor ``name`` (as bound by ``binding``) inside a right-hand side.

    ``integer_names`` are names known to hold Python integers (a ``range`` loop variable):
    indexing with them returns a view, as with an integer literal.
    """

    def __init__(
        self,
        analysis: Semantic,
        name: str,
        binding: Binding,
        integer_names: frozenset[str] = frozenset(),
    ) -> None:
        self.analysis = analysis
        self.name = name
        self.binding = binding
        self.integer_names = integer_names

    def saved_in(self, expr: ast.expr) -> bool:
        """Some op on the graph path of ``expr`` saves a view of the tensor for backward."""
        if self.is_view(expr):
            return False  # a read; whether it is saved depends on the op around it
        if type(expr) is ast.Subscript or (
            type(expr) is ast.Attribute and expr.attr in VIEW_ATTRIBUTES
        ):
            return self.saved_in(expr.value)  # a view of an intermediate result
        op = self.analysis.tensor_op(expr, expr)
        saved = self.analysis.saved_operands(expr, expr)
        if op is None or saved is None or op[0] == "detach":
            return False  # unknown op, or the graph is cut here
        if any(self.is_view(o) for o in saved):
            return True
        return any(self.saved_in(o) for o in op[1])

    def is_view(self, expr: ast.expr, depth: int = 0) -> bool:
        """``expr`` shares storage and version counter with the tensor."""
        if depth > 8:
            return False
        if type(expr) is ast.Name:
            return self._is_self_or_alias(expr, depth)
        if type(expr) is ast.Subscript:
            elements = index_elements(self.analysis, expr)
            return all(self._is_view_index(e) for e in elements) and self.is_view(
                expr.value, depth + 1
            )
        if type(expr) is ast.Attribute:
            return expr.attr in VIEW_ATTRIBUTES and self.is_view(expr.value, depth + 1)
        op = self.analysis.tensor_op(expr, expr)
        return (
            op is not None
            and op[0] in VIEW_OPS
            and bool(op[1])
            and (self.is_view(op[1][0], depth + 1))
        )

    def _is_view_index(self, element: ast.expr) -> bool:
        if type(element) is ast.Name and element.id in self.integer_names:
            return True
        return is_basic_index(element)

    def _is_self_or_alias(self, name: ast.Name, depth: int) -> bool:
        binding = self.analysis.reaching_binding(name, name)
        if binding is None:
            return False
        if name.id == self.name and binding is self.binding:
            return True
        # ``r1 = p[0]`` earlier: ``r1`` is a view of ``p``
        if binding.kind != "assign" or binding.value is None or binding.unpack_index is not None:
            return False
        return self._bound_view(binding.value, binding.node, depth + 1)

    def _bound_view(self, value: ast.expr, at: ast.AST, depth: int) -> bool:
        names = [n for n in names_in(value) if n.id == self.name]
        same = all(self.analysis.reaching_binding(n, at) is self.binding for n in names)
        return bool(names) and same and self.is_view(value, depth)


class _NameCollector(VariableNames):
    """Variables under a node, not those of a signature (parameters, their defaults and
    annotations), as LibCST's ``Param`` walk skipped them."""

    def visit_arguments(self, node: ast.arguments) -> None:
        return None


def assigned_value(
    analysis: Semantic, name: ast.Name, at: ast.AST
) -> tuple[ast.expr, ast.AST] | None:
    """The value of the plain ``name = value`` that reaches ``at`` (not an unpacking, a
    parameter or a loop variable), and the statement that binds it."""
    binding = analysis.reaching_binding(name, at)
    if binding is None or binding.kind != "assign" or binding.value is None:
        return None
    if binding.unpack_index is not None:
        return None
    return binding.value, binding.node


def names_in(node: ast.AST) -> list[ast.Name]:
    """The variables (``ast.Name``) under ``node``, in source order, without those of a
    signature."""
    collector = _NameCollector()
    collector.visit(node)
    return collector.names


# -- indices -----------------------------------------------------------------------------------
def index_elements(analysis: Semantic, subscript: ast.Subscript) -> list[ast.expr]:
    """The comma-separated indices of ``x[a, b:c]`` (each an expression or ``ast.Slice``);
    ``x[(a, b)]`` indexes with one tuple, as LibCST's one ``SubscriptElement`` said."""
    index = subscript.slice
    if type(index) is not ast.Tuple or _parenthesized(analysis, index):
        return [index]
    return list(index.elts)


def _parenthesized(analysis: Semantic, tuple_: ast.Tuple) -> bool:
    """``(a, b)``, ``()``: the tuple has its own parentheses (``(a), b`` has not)."""
    if not tuple_.elts:
        return True
    text = analysis.segment(tuple_) or ""
    if not (text.startswith("(") and text.endswith(")")):
        return False
    try:  # ``(a), (b)`` is no longer an expression without its outer characters
        pyast.parse(f"[{text[1:-1]}]", mode="eval")
    except SyntaxError:
        return False
    return True


def is_basic_index(element: ast.expr) -> bool:
    """Integer, slice, ``...`` or ``None``: indexing that returns a view."""
    if type(element) is ast.Slice:
        return True
    if type(element) is ast.Constant and (element.value is Ellipsis or element.value is None):
        return True
    return integer_index(element) is not None


def integer_index(element: ast.expr) -> int | None:
    """``[2]`` -> 2, ``[-1]`` -> -1; None for any other index."""
    if type(element) is ast.Constant and type(element.value) is int:
        return element.value
    if (
        type(element) is ast.UnaryOp
        and type(element.op) is ast.USub
        and type(element.operand) is ast.Constant
        and type(element.operand.value) is int
    ):
        return -element.operand.value
    return None


# -- when rebinding is the same as writing in place ------------------------------------------
def rebindable(analysis: Semantic, node: ast.AST, binding: Binding) -> bool:
    """``p = <new tensor>`` at ``node`` replaces the write: ``p`` is a fresh tensor bound
    in the same scope, on every path to ``node``."""
    if binding.kind != "assign" or binding.value is None or binding.unpack_index is not None:
        return False
    if analysis.scope_of(binding.node).node is not analysis.scope_of(node).node:
        return False  # assigning would make the name local to the inner scope
    if not _in_block_of(analysis, binding.node, node):
        return False  # bound in a branch that may not run
    return is_fresh(analysis, binding.value, binding.node)


def _in_block_of(analysis: Semantic, bound: ast.AST, node: ast.AST) -> bool:
    """``node`` sits in the block (statement list) that holds the statement ``bound``."""
    owner = analysis.parent(bound)
    if owner is None:
        return False
    if not isinstance(bound, ast.stmt):  # ``(p := ...)``: the expression around it
        outer = analysis.parent(owner)
        return outer is not None and analysis.contains(outer, node)
    for block in _blocks(owner):
        if any(s is bound for s in block):
            return analysis.block_contains(block, node)
    return False


def _blocks(owner: ast.AST) -> list[list[ast.stmt]]:
    blocks = [getattr(owner, name) for name in _BLOCK_FIELDS if hasattr(owner, name)]
    return [b for b in blocks if type(b) is list]


def is_fresh(analysis: Semantic, value: ast.expr, at: ast.AST) -> bool:
    """``value`` makes a new tensor (not a view or an alias of another one)."""
    if type(value) is ast.BinOp or type(value) is ast.UnaryOp:
        return analysis.tensor_op(value, at) is not None
    if type(value) is not ast.Call:
        return False
    if analysis.call_name(value) in FACTORIES:
        return True
    if analysis.is_nn_layer(value.func, at):
        return True
    op = analysis.tensor_op(value, at)
    return op is not None and op[0] in FRESH_OPS and op[0] not in MAY_ALIAS_OPS


def may_alias(analysis: Semantic, node: ast.AST, name: str, binding: Binding) -> bool:
    """Something besides the name may hold the tensor: an alias made between the binding
    and ``node``, or a loop around ``node`` that carries the tensor to the next iteration."""
    for loop in analysis.ancestors(node):
        is_loop = type(loop) in (ast.For, ast.AsyncFor, ast.While)
        if is_loop and not analysis.contains(loop, binding.node):
            return True
    scope = analysis.scope_of(node).node
    start, end = binding.end, analysis.index(node)
    for read in names_in(scope):
        if read.id != name or not start < analysis.index(read) < end:
            continue
        if not _in_fill(analysis, read, name):
            return True
    return False


def _in_fill(analysis: Semantic, read: ast.Name, name: str) -> bool:
    """``read`` is inside a statement ``name[...] = value`` (filling the tensor) that has
    its line(s) to itself."""
    statement = analysis.enclosing_statement(read)
    if type(statement) is not ast.Assign or len(statement.targets) != 1:
        return False
    if not _alone_on_its_lines(analysis, statement):
        return False  # LibCST saw a line of several statements, or a one-line block
    target = statement.targets[0]
    return (
        type(target) is ast.Subscript and type(target.value) is ast.Name and target.value.id == name
    )


def _alone_on_its_lines(analysis: Semantic, statement: ast.stmt) -> bool:
    """Nothing but blanks before ``statement`` on its first line, and at most a ``;`` and
    a comment after it on its last."""
    lines = _LINE_END.split(analysis.source)
    first = lines[statement.lineno - 1].encode()
    last = lines[(statement.end_lineno or statement.lineno) - 1].encode()
    if first[: statement.col_offset].strip():
        return False
    after = last[statement.end_col_offset :].strip()
    if after.startswith(b";"):
        after = after[1:].strip()
    return not after or after.startswith(b"#")
