"""GF202 self-referencing-index-assign."""

from __future__ import annotations

import ast
from collections.abc import Sequence

import libcst as cst

from gradfix.edits import Editor
from gradfix.rebuild import (
    POINTWISE_OPS,
    SelfReads,
    assigned_value,
    index_elements,
    integer_index,
    is_basic_index,
    may_alias,
    names_in,
    rebindable,
)
from gradfix.rule import Edit, FixAvailability, FixPlan, FixSafety, Invalid, Rule, Valid
from gradfix.semantic import Binding, Semantic
from gradfix.semantic.syntax import argument_value, is_number_literal, literal_items
from gradfix.torch_facts import LIKE_FACTORIES, SIZED_FACTORIES, VIEW_ATTRIBUTES

#: Longest tensor rebuilt element by element with ``torch.stack``; longer ones use ``cat``.
MAX_STACK_ELEMENTS = 8


class SelfReferencingIndexAssign(Rule):
    """
    ## What it does
    Finds index assignments `p[k] = f(p)` into a tensor that requires grad whose right-hand
    side reads `p` itself through an op that saves it for backward (`p[0] / p[1]`,
    `p[0] * p[1]`, `p[0] ** 2`, `torch.log(p[1])`...), and rebuilds `p` out of place.

    ## Why is this bad?
    `p[0]` and `p[1]` are views of `p`: the division saves them for its backward, and the
    assignment then changes `p` in place, which bumps the version counter they share.
    `backward()` fails with "one of the variables needed for gradient computation has been
    modified by an inplace operation: [torch.FloatTensor []], which is output 0 of
    AsStridedBackward0, is at version 1; expected version 0 instead." Ops that save
    nothing of `p` (`p[0] + p[1]`, `p[0] * 2`, `torch.exp(p[0])`) do not fail and are not
    reported.

    ## Example
    ```python
    paramn = torch.zeros([3])
    paramn[0] = self.paramn_[0]  # R1n
    paramn[1] = self.paramn_[1]  # R2n
    param = paramn * (self.param_max - self.param_min) + self.param_min
    param[2] = param[0] / param[1]  # k = R1 / R2
    ```

    ## Use instead
    ```python
    param = torch.stack([param[0], param[1], param[0] / param[1]])  # k = R1 / R2
    ```
    When the length of `p` is unknown (or large):
    `p = torch.cat([p[:k], (f(p)).reshape(1), p[k + 1:]])`. With slices or several
    dimensions (`x[0, :, 0] = x[0, :, 0] * v`), or when `p` cannot be rebound, the op
    saves a copy of what it reads: `x[0, :, 0] = x[0, :, 0].clone() * v`. Detaching the
    right-hand side also silences the error but drops that gradient branch: it is not a
    fix.

    ## Fix safety
    Safe when `p` is a fresh 1-D tensor of known length (a sized constructor, a literal,
    `torch.stack`, or elementwise arithmetic of those), the index is an integer literal,
    the right-hand side is computed from elements of `p` and numbers only (so it is 0-d
    with the dtype of `p`), and nothing else holds `p` (no alias, no loop carrying it).
    Unsafe otherwise: the `cat` form is only right for a 1-D `p`, and a right-hand side
    with other tensors may have another dtype or shape. The `.clone()` of the saved
    reads is safe: the values, the dtype and the in-place change of `p` (which every
    alias sees) stay as they were; it is not offered when an op saved `p` itself
    (`p = torch.sigmoid(w)`: the change still breaks that save, GF204), and then the
    finding is reported without a fix.
    """

    code = "GF202"
    assign_targets = frozenset({ast.Subscript})  # visit_Assign: ``p[2] = p[0] / p[1]``
    name = "self-referencing-index-assign"
    synopsis = (
        "Finds index assignments `p[k] = f(p)` that overwrite a value saved for backward "
        "and rebuilds `p` with `torch.stack` / `torch.cat`."
    )
    message = (
        "Index assignment into a tensor whose right-hand side reads it through an op that "
        "saves it for backward: backward fails with 'modified by an inplace operation'"
    )
    fix_safety = FixSafety.SAFE
    fix_availability = FixAvailability.SOMETIMES
    fix_safeties = (FixSafety.SAFE, FixSafety.UNSAFE)

    VALID = [
        Valid(
            """
            import torch
            from torch import nn

            class PositionalEmbedding(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.w = nn.Parameter(torch.rand(2, 8))

                def forward(self, input_coords, input_shape=None):
                    coordinates = input_coords.clone()
                    if input_shape is not None:  # a (height, width) tuple: no tensor
                        coordinates[:, :, :, 0] = coordinates[:, :, :, 0] / input_shape[1]
                    return coordinates @ self.w
            """
        ),
        Valid(
            """
            import torch
            a = torch.nn.Parameter(torch.rand(5))
            A2 = torch.zeros(5)
            A2[0] = a[0] * 2
            A2[1] = torch.log(a[1] + 1)
            A2[2] = a[2] ** 2
            """
        ),
        Valid(
            """
            import torch
            w = torch.nn.Parameter(torch.rand(3))
            p = w * 1.0
            p[2] = p[0] + p[1]  # add saves nothing
            q = w * 1.0
            q[2] = q[0] * 2 - torch.exp(q[1])  # constant factor, exp saves its output
            """
        ),
        Valid(
            """
            import numpy as np
            import torch
            arr = np.ones(3)
            arr[2] = arr[0] / arr[1]
            t = torch.rand(3)
            t[2] = t[0] / t[1]  # data: nothing requires grad
            """
        ),
        Valid(
            """
            import torch
            w = torch.nn.Parameter(torch.rand(3))
            p = w * 2.0
            with torch.no_grad():
                p[2] = p[0] / p[1]
            """
        ),
        Valid(
            """
            import torch
            w = torch.nn.Parameter(torch.rand(3))
            parts = [w[0] * 1, w[1] * 1, None]
            parts[2] = parts[0] / parts[1]  # a list, not a tensor
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch

            class Example(torch.nn.Module):
                def __init__(self):
                    super().__init__()
                    self.paramn_ = torch.nn.Parameter(torch.rand(2))
                    self.param_max = torch.tensor([2, 4, 2])
                    self.param_min = torch.tensor([1, 2, 0])

                @property
                def Param(self):
                    paramn = torch.zeros([3])
                    paramn[0] = self.paramn_[0]  # R1n
                    paramn[1] = self.paramn_[1]  # R2n
                    param = paramn * (self.param_max - self.param_min) + self.param_min
                    param[2] = param[0] / param[1]  # k = R1 / R2
                    return (param - self.param_min) / (self.param_max - self.param_min)
            """,
            """
            import torch

            class Example(torch.nn.Module):
                def __init__(self):
                    super().__init__()
                    self.paramn_ = torch.nn.Parameter(torch.rand(2))
                    self.param_max = torch.tensor([2, 4, 2])
                    self.param_min = torch.tensor([1, 2, 0])

                @property
                def Param(self):
                    paramn = torch.zeros([3])
                    paramn[0] = self.paramn_[0]  # R1n
                    paramn[1] = self.paramn_[1]  # R2n
                    param = paramn * (self.param_max - self.param_min) + self.param_min
                    param = torch.stack([param[0], param[1], param[0] / param[1]])  # k = R1 / R2
                    return (param - self.param_min) / (self.param_max - self.param_min)
            """,
        ),
        Invalid(
            """
            import torch as th
            from torch import nn

            head = nn.Linear(4, 3)
            out = head(th.rand(4))
            out[1] = out[0] * out[2]
            """,
            """
            import torch as th
            from torch import nn

            head = nn.Linear(4, 3)
            out = head(th.rand(4))
            out = th.cat([out[:1], (out[0] * out[2]).reshape(1), out[2:]])
            """,
        ),
        Invalid(
            """
            import torch
            w = torch.randn(4, requires_grad=True)
            v = w.exp()
            v[-1] = torch.sin(v[0])
            """,
            """
            import torch
            w = torch.randn(4, requires_grad=True)
            v = w.exp()
            v = torch.stack([v[0], v[1], v[2], torch.sin(v[0])])
            """,
        ),
        Invalid(
            """
            import torch
            w = torch.nn.Parameter(torch.rand(2, 3))
            h = w * 3.0
            h[0, 2] = h[0, 0] / h[1, 1]
            """,
            """
            import torch
            w = torch.nn.Parameter(torch.rand(2, 3))
            h = w * 3.0
            h[0, 2] = h[0, 0].clone() / h[1, 1].clone()
            """,
        ),
        Invalid(
            """
            import torch
            w = torch.nn.Parameter(torch.rand(6))
            p = torch.sigmoid(w)
            p[3:] = p[:3] ** 2
            """,
            report_only=True,
        ),
    ]

    def visit_Assign(self, node: ast.Assign) -> None:
        if len(node.targets) != 1:
            return
        target = node.targets[0]
        if type(target) is not ast.Subscript or type(target.value) is not ast.Name:
            return
        analysis = self.analysis
        index = _literal_index(analysis, target)
        if index is None:  # a loop variable (GF203) or an index we cannot read
            return
        base = target.value
        if analysis.in_no_grad(node) or analysis.leaf_reason(base, node) is not None:
            return  # leaves raise at once: GF201 leaf-inplace
        if not analysis.is_tensor(base, node) or not analysis.requires_grad(base, node):
            return
        binding = analysis.reaching_binding(base, node)
        if binding is None or not _SelfReads(analysis, base.id, binding).saved_in(node.value):
            return
        message = (
            f"`{base.id}[...] = ...` reads `{base.id}` through an op that saves it for "
            "backward: backward fails with 'modified by an inplace operation'; rebuild "
            f"`{base.id}` out of place"
        )
        self.report(node, message, fix=self._fix(node, base, binding, index))

    def _fix(
        self, node: ast.Assign, base: ast.Name, binding: Binding, index: int | str
    ) -> FixPlan | None:
        if not isinstance(index, int) or not rebindable(self.analysis, node, binding):
            return self._clone_fix(node, base, binding)
        length = _vector_length(self.analysis, base, node)
        if length is not None:
            index = index + length if index < 0 else index
            if not 0 <= index < length:
                return None  # the original raises IndexError
        reads = _SelfReads(self.analysis, base.id, binding)
        if length is not None and length <= MAX_STACK_ELEMENTS:
            combine = "stack"
        elif index >= 0:  # (a known length has made the index non-negative)
            combine = "cat"
        else:
            return None  # a negative index into a tensor of unknown length
        safe = (
            length is not None
            and reads.element_only(node.value)
            and not may_alias(self.analysis, node, base.id, binding)
        )
        name, at = base.id, index

        def rebuilt(editor: Editor, assign: cst.CSTNode) -> cst.Assign:
            assert isinstance(assign, cst.Assign)
            if combine == "stack":
                assert length is not None
                value = _stacked(editor, name, assign.value, at, length)
            else:
                value = _concatenated(editor, name, assign.value, at, length)
            return assign.with_changes(
                targets=[assign.targets[0].with_changes(target=cst.Name(name))], value=value
            )

        return self.plan_replace(
            node,
            rebuilt,
            f"Rebuild `{name}` out of place with `torch.{combine}`",
            safety=None if safe else FixSafety.UNSAFE,
        )

    def _clone_fix(self, node: ast.Assign, base: ast.Name, binding: Binding) -> FixPlan | None:
        """``x[0, :, 0] = x[0, :, 0] * v`` -> ``x[0, :, 0] = x[0, :, 0].clone() * v``: the op
        saves a copy, and ``x`` is still changed in place (every alias sees what it saw).
        Not when an op saved ``x`` itself (``x = torch.sigmoid(...)``): the change would
        still break that save (GF204)."""
        analysis = self.analysis
        value = binding.value
        if binding.kind == "assign" and value is not None and analysis.saves_output(value, node):
            return None
        views = _SelfReads(analysis, base.id, binding).saved_views(node.value)
        if not views:
            return None

        def build(editor: Editor) -> list[Edit]:
            edits = []
            for view in views:
                old = editor.node(view)
                assert isinstance(old, cst.BaseExpression)
                edits.append(Edit(old, cst.Call(cst.Attribute(_atomic(old), cst.Name("clone")))))
            return edits

        return self.plan(build, "Let the op save a copy: `.clone()` the element it reads")


def _stacked(
    editor: Editor, name: str, value: cst.BaseExpression, index: int, length: int
) -> cst.BaseExpression:
    elements = [value if i == index else _element(name, i) for i in range(length)]
    return _call(editor.torch_attr("stack"), elements)


def _concatenated(
    editor: Editor, name: str, value: cst.BaseExpression, index: int, length: int | None
) -> cst.BaseExpression:
    reshaped = cst.Call(
        cst.Attribute(_atomic(value), cst.Name("reshape")), [cst.Arg(cst.Integer("1"))]
    )
    pieces: list[cst.BaseExpression] = []
    if index != 0:
        pieces.append(_slice(name, None, index))
    pieces.append(reshaped)
    if length is None or index + 1 < length:
        pieces.append(_slice(name, index + 1, None))
    return _call(editor.torch_attr("cat"), pieces)


class _SelfReads(SelfReads):
    """Reads of the tensor, and whether a right-hand side is made of its single elements."""

    def saved_views(self, expr: ast.expr) -> list[ast.expr]:
        """The reads of the tensor that the ops of ``expr`` save for backward."""
        if self.is_view(expr):
            return []
        if type(expr) is ast.Subscript or (
            type(expr) is ast.Attribute and expr.attr in VIEW_ATTRIBUTES
        ):
            return self.saved_views(expr.value)
        op = self.analysis.tensor_op(expr, expr)
        saved = self.analysis.saved_operands(expr, expr)
        if op is None or saved is None or op[0] == "detach":
            return []
        views = [o for o in saved if self.is_view(o)]
        return views + [v for o in op[1] for v in self.saved_views(o) if v not in views]

    def element_only(self, expr: ast.expr) -> bool:
        """``expr`` is computed elementwise from single elements ``p[i]`` and numbers."""
        if is_number_literal(expr):
            return True
        if self.is_view(expr):
            return self._is_element(expr)
        op = self.analysis.tensor_op(expr, expr)
        return (
            op is not None and op[0] in POINTWISE_OPS and all(self.element_only(o) for o in op[1])
        )

    def _is_element(self, expr: ast.expr) -> bool:
        if type(expr) is ast.Name and expr.id != self.name:
            binding = self.analysis.reaching_binding(expr, expr)
            return (
                binding is not None
                and binding.value is not None
                and (self._is_element(binding.value))
            )
        return (
            type(expr) is ast.Subscript
            and _single_integer_index(self.analysis, expr)
            and type(expr.value) is ast.Name
            and expr.value.id == self.name
        )


# -- the index ---------------------------------------------------------------------------
def _literal_index(analysis: Semantic, target: ast.Subscript) -> int | str | None:
    """``p[2]`` -> 2, ``p[-1]`` -> -1; other literal indexing (``p[1:]``, ``p[0, 2]``) ->
    "other"; an index with names in it -> None."""
    elements = index_elements(analysis, target)
    if not all(is_basic_index(e) and not names_in(e) for e in elements):
        return None
    if len(elements) == 1:
        k = integer_index(elements[0])
        if k is not None:
            return k
    return "other"


def _single_integer_index(analysis: Semantic, subscript: ast.Subscript) -> bool:
    """``v[2]``, ``v[-1]``: one element of a 1-D ``v``."""
    elements = index_elements(analysis, subscript)
    return len(elements) == 1 and integer_index(elements[0]) is not None


# -- static length of a 1-D tensor ------------------------------------------------------------
def _vector_length(analysis: Semantic, expr: ast.expr, at: ast.AST, depth: int = 0) -> int | None:
    """The length of ``expr`` when it is provably a 1-D tensor of known length."""
    if depth > 10:
        return None
    if type(expr) is ast.Name:
        assigned = assigned_value(analysis, expr, at)
        if assigned is None:
            return None
        value, statement = assigned
        return _vector_length(analysis, value, statement, depth + 1)
    if type(expr) is ast.Attribute:
        return _attribute_length(analysis, expr, at, depth)
    if type(expr) is ast.Call:
        return _call_length(analysis, expr, at, depth)
    op = analysis.tensor_op(expr, at)
    if op is not None and op[0] in POINTWISE_OPS:
        return _broadcast_length(analysis, op[1], at, depth)
    return None


def _attribute_length(
    analysis: Semantic, attr: ast.Attribute, at: ast.AST, depth: int
) -> int | None:
    """``self.w`` assigned in the class: the length all its assignments agree on."""
    assigned = analysis.self_attribute_values(attr, at)
    lengths = {_vector_length(analysis, v, b.node, depth + 1) for v, b in assigned}
    return lengths.pop() if len(lengths) == 1 else None


def _call_length(analysis: Semantic, call: ast.Call, at: ast.AST, depth: int) -> int | None:
    name = analysis.call_name(call)
    positional = [a for a in call.args if type(a) is not ast.Starred]
    if name in SIZED_FACTORIES and len(positional) == 1:
        return _size_length(positional[0])
    if name == "torch.full" and positional:
        return _size_length(positional[0])
    if name in ("torch.tensor", "torch.as_tensor") and positional:
        data = positional[0]
        if type(data) is ast.List or type(data) is ast.Tuple:
            elements = data.elts
            if all(is_number_literal(argument_value(e)) for e in elements):
                return len(elements)
        return None
    if (name in LIKE_FACTORIES or name == "torch.nn.Parameter") and positional:
        return _vector_length(analysis, positional[0], at, depth + 1)
    op = analysis.tensor_op(call, at)
    if op is None or any(k.arg == "dim" for k in call.keywords):
        return None
    if op[0] in ("stack", "cat") and len(positional) == 1:
        return _joined_length(analysis, op[0], positional[0], at, depth)
    if op[0] in POINTWISE_OPS:
        return _broadcast_length(analysis, op[1], at, depth)
    return None


def _size_length(size: ast.expr) -> int | None:
    """``3``, ``[3]``, ``(3,)`` -> 3."""
    if type(size) is ast.List or type(size) is ast.Tuple:
        if len(size.elts) != 1:
            return None
        size = argument_value(size.elts[0])
    if type(size) is ast.Constant and type(size.value) is int:
        return size.value
    return None


def _joined_length(
    analysis: Semantic, combine: str, data: ast.expr, at: ast.AST, depth: int
) -> int | None:
    """``torch.stack([a, b, c])`` of 0-d tensors -> 3; ``torch.cat([x, y])`` of 1-D -> sum."""
    values = literal_items(data)
    if not values:
        return None  # not a literal, empty, or with ``*unpacking``
    if combine == "stack":
        scalar = all(_is_scalar(analysis, v, at, depth + 1) for v in values)
        return len(values) if scalar else None
    lengths = [_vector_length(analysis, v, at, depth + 1) for v in values]
    return None if None in lengths else sum(n for n in lengths if n is not None)


def _is_scalar(analysis: Semantic, expr: ast.expr, at: ast.AST, depth: int) -> bool:
    """``expr`` is a 0-d tensor: ``v[i]`` of a 1-D ``v``, or elementwise ops of such."""
    if type(expr) is ast.Subscript:
        return (
            _single_integer_index(analysis, expr)
            and _vector_length(analysis, expr.value, at, depth + 1) is not None
        )
    op = analysis.tensor_op(expr, at)
    if op is None or op[0] not in POINTWISE_OPS or depth > 10:
        return False
    scalars = [_is_scalar(analysis, o, at, depth + 1) for o in op[1]]
    return any(scalars) and all(s or is_number_literal(o) for s, o in zip(scalars, op[1]))


def _broadcast_length(
    analysis: Semantic, operands: Sequence[ast.expr], at: ast.AST, depth: int
) -> int | None:
    """The length of an elementwise op over 1-D operands, numbers and 0-d tensors."""
    lengths: set[int] = set()
    for operand in operands:
        if is_number_literal(operand) or _is_scalar(analysis, operand, at, depth + 1):
            continue
        length = _vector_length(analysis, operand, at, depth + 1)
        if length is None:
            return None
        lengths.add(length)
    if len(lengths) > 1:
        lengths.discard(1)  # length-1 operands broadcast
    return lengths.pop() if len(lengths) == 1 else None


# -- building the replacement ------------------------------------------------------------------
def _element(name: str, index: int) -> cst.Subscript:
    return cst.Subscript(cst.Name(name), [cst.SubscriptElement(cst.Index(cst.Integer(str(index))))])


def _slice(name: str, lower: int | None, upper: int | None) -> cst.Subscript:
    """``name[lower:upper]`` with non-negative bounds (None: omitted)."""
    lower_bound = None if lower is None else cst.Integer(str(lower))
    upper_bound = None if upper is None else cst.Integer(str(upper))
    return cst.Subscript(
        cst.Name(name), [cst.SubscriptElement(cst.Slice(lower=lower_bound, upper=upper_bound))]
    )


def _call(func: cst.BaseExpression, elements: Sequence[cst.BaseExpression]) -> cst.Call:
    return cst.Call(func, [cst.Arg(cst.List([cst.Element(e) for e in elements]))])


def _atomic(expr: cst.BaseExpression) -> cst.BaseExpression:
    """``expr`` ready to take ``.reshape(1)``: parenthesised unless it binds tighter."""
    if expr.lpar or isinstance(expr, (cst.Name, cst.Attribute, cst.Call, cst.Subscript)):
        return expr
    return expr.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
