"""GF303 sqrt-of-squares."""

from __future__ import annotations

import re
from collections.abc import Sequence

import libcst as cst

from gradfix.analysis import argument
from gradfix.rule import Fix, FixAvailability, FixSafety, Invalid, Rule, Valid

#: Expressions safe to read twice in ``x * x`` (no side effect, no fresh random values).
_PURE = (cst.Name, cst.Attribute, cst.Subscript)
#: Parentheses an expression needs to stay one call argument.
_NEEDS_PARENS = (cst.Tuple, cst.NamedExpr, cst.GeneratorExp)
_NO_SPACE = cst.SimpleWhitespace("")


class SqrtOfSquares(Rule):
    """
    ## What it does
    Finds a Euclidean norm written by hand, `torch.sqrt((x ** 2).sum(...))`,
    `(x * x).sum().sqrt()`, `x.pow(2).sum(-1) ** 0.5`, on a tensor that requires grad,
    and rewrites it to `torch.linalg.vector_norm(x, dim=...)`.

    ## Why is this bad?
    The derivative of `sqrt(s)` is `1 / (2 * sqrt(s))`: where `x` is all zeros (a
    zero-distance pair, a padded row, an embedding at the origin) it is `inf`, and the chain
    rule multiplies it by `2 * x = 0`, giving `0 * inf = nan`. One `nan` in the gradient
    poisons every parameter at the next optimizer step.

    ## Example
    ```python
    diff = a - b  # a pair of identical points
    dist = torch.sqrt((diff ** 2).sum(-1))
    dist.sum().backward()  # a.grad is nan
    ```

    ## Use instead
    ```python
    dist = torch.linalg.vector_norm(diff, dim=-1)  # gradient 0 at 0 (a subgradient)
    ```
    `dim` and `keepdim` are carried over; a sum over every element becomes
    `torch.linalg.vector_norm(x)`.

    ## Fix safety
    Safe: `vector_norm` computes the same value (equal to rounding, in the same dtype) and
    only changes the gradient where it was `nan` (there it becomes 0, a subgradient). For
    real dtypes only: on a complex tensor `x ** 2` is not `|x| ** 2`, but autograd through a
    hand-written complex norm is not a realistic case. Sums with other arguments (`dtype=`) are
    reported without a fix. Not reported: an `eps` already added under the square root,
    `x.norm()`, tensors that do not require grad, code under `torch.no_grad()`.
    """

    code = "GF303"
    name = "sqrt-of-squares"
    message = "`sqrt` of a sum of squares has a `nan` gradient at 0; use `torch.linalg.vector_norm`"
    fix_safety = FixSafety.SAFE
    fix_availability = FixAvailability.SOMETIMES
    default_enabled = True
    prefilter = ("sqrt", re.compile(r"\*\*[\s\\(]*[.\d]"))  # `** 0.5`, `**.5`, `** (0.5)`

    VALID = [
        Valid(
            """
            import torch
            w = torch.randn(3, requires_grad=True)
            n = torch.sqrt((w ** 2).sum() + 1e-8)  # eps already inside
            """
        ),
        Valid(
            """
            import torch
            w = torch.randn(3, requires_grad=True)
            n = torch.linalg.vector_norm(w, dim=-1)
            m = w.norm()
            """
        ),
        Valid(
            """
            import torch
            w = torch.randn(3, requires_grad=True)
            s = torch.sqrt(w.abs().sum())
            """
        ),
        Valid(
            """
            import torch
            pred = torch.randn(5)
            rmse = torch.sqrt(((pred - 1.0) ** 2).sum())  # data, no gradient
            """
        ),
        Valid(
            """
            import torch
            w = torch.randn(3, requires_grad=True)
            with torch.no_grad():
                n = torch.sqrt((w ** 2).sum())
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            a = torch.randn(4, 3, requires_grad=True)
            b = torch.randn(4, 3)
            d = torch.sqrt(((a - b) ** 2).sum(-1))
            """,
            """
            import torch
            a = torch.randn(4, 3, requires_grad=True)
            b = torch.randn(4, 3)
            d = torch.linalg.vector_norm(a - b, dim=-1)
            """,
        ),
        Invalid(
            """
            import torch as th
            w = th.randn(3, requires_grad=True)
            n = (w * w).sum().sqrt()
            m = w.pow(2).sum(1, keepdim=True) ** 0.5
            """,
            """
            import torch as th
            w = th.randn(3, requires_grad=True)
            n = th.linalg.vector_norm(w)
            m = th.linalg.vector_norm(w, dim=1, keepdim=True)
            """,
        ),
        Invalid(
            """
            import torch
            from torch import nn

            class Normalize(nn.Module):
                def forward(self, x):
                    return x / torch.sqrt(torch.sum(x ** 2, dim=1, keepdim=True))
            """,
            """
            import torch
            from torch import nn

            class Normalize(nn.Module):
                def forward(self, x):
                    return x / torch.linalg.vector_norm(x, dim=1, keepdim=True)
            """,
        ),
        Invalid(
            """
            import torch
            x = torch.randn(3, requires_grad=True)
            norm = torch.sqrt((x ** 2).sum(dtype=torch.float64))  # no fix: `dtype` of the sum
            """,
            report_only=True,
        ),
    ]

    def visit_Call(self, node: cst.Call) -> None:
        if self.analysis.call_name(node) == "torch.sqrt":
            if len(node.args) == 1 and node.args[0].keyword is None and not node.args[0].star:
                self._check(node, node.args[0].value)
        elif isinstance(node.func, cst.Attribute) and node.func.attr.value == "sqrt":
            if not node.args and self.analysis.qualified_name(node.func) is None:
                self._check(node, node.func.value)

    def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
        exponent = node.right
        if isinstance(node.operator, cst.Power) and isinstance(exponent, cst.Float):
            if float(exponent.value) == 0.5:
                self._check(node, node.left)

    def _check(self, node: cst.BaseExpression, summed: cst.BaseExpression) -> None:
        parts = self._sum_of_squares(summed)
        if parts is None:
            return
        base, dims = parts
        if not self.analysis.requires_grad(base, node) or self.analysis.in_no_grad(node):
            return
        self.report(node, fix=self._fix(node, base, dims))

    def _sum_of_squares(
        self, expr: cst.BaseExpression
    ) -> tuple[cst.BaseExpression, list[cst.Arg] | None] | None:
        """``(x, dim/keepdim args)`` for ``(x ** 2).sum(...)`` / ``torch.sum(x ** 2, ...)``;
        the args are None when the sum has others (``dtype=``)."""
        if not isinstance(expr, cst.Call):
            return None
        if self.analysis.call_name(expr) == "torch.sum":
            if not expr.args or expr.args[0].keyword is not None or expr.args[0].star:
                return None
            squared, rest, first_dim = expr.args[0].value, expr.args[1:], 1
        elif isinstance(expr.func, cst.Attribute) and expr.func.attr.value == "sum":
            if self.analysis.qualified_name(expr.func) is not None:
                return None
            squared, rest, first_dim = expr.func.value, expr.args, 0
        else:
            return None
        base = self._squared_base(squared)
        if base is None:
            return None
        return base, _norm_dims(expr, rest, first_dim)

    def _squared_base(self, expr: cst.BaseExpression) -> cst.BaseExpression | None:
        """``x`` for ``x ** 2``, ``x * x``, ``x.pow(2)``, ``torch.pow(x, 2)``, ``x.square()``."""
        if isinstance(expr, cst.BinaryOperation):
            if isinstance(expr.operator, cst.Power) and _is_two(expr.right):
                return expr.left
            same = expr.left.deep_equals(expr.right)
            if isinstance(expr.operator, cst.Multiply) and same and isinstance(expr.left, _PURE):
                return expr.left
            return None
        if not isinstance(expr, cst.Call):
            return None
        name = self.analysis.call_name(expr)
        args = [a for a in expr.args if a.keyword is None and not a.star]
        if len(args) != len(expr.args):
            return None
        if name == "torch.square" and len(args) == 1:
            return args[0].value
        if name == "torch.pow" and len(args) == 2 and _is_two(args[1].value):
            return args[0].value
        func = expr.func
        if not isinstance(func, cst.Attribute) or self.analysis.qualified_name(func) is not None:
            return None
        if func.attr.value == "square" and not args:
            return func.value
        if func.attr.value == "pow" and len(args) == 1 and _is_two(args[0].value):
            return func.value
        return None

    def _fix(
        self, node: cst.BaseExpression, base: cst.BaseExpression, dims: list[cst.Arg] | None
    ) -> Fix | None:
        if dims is None:
            return None
        if not isinstance(base, _NEEDS_PARENS):
            base = base.with_changes(lpar=[], rpar=[])
        new = cst.Call(
            self.analysis.torch_attr("linalg.vector_norm"),
            [cst.Arg(base), *dims],
            lpar=node.lpar,
            rpar=node.rpar,
        )
        return self.replace(node, new, "Use `torch.linalg.vector_norm`")


def _norm_dims(call: cst.Call, rest: Sequence[cst.Arg], first: int) -> list[cst.Arg] | None:
    """The sum's ``dim``/``keepdim`` as keyword arguments, None if it has any other."""
    known = {"dim", "axis", "keepdim"}
    if any(a.star or (a.keyword is not None and a.keyword.value not in known) for a in rest):
        return None
    if len([a for a in rest if a.keyword is None]) > 2:
        return None
    dims = []
    for keyword, position in (("dim", first), ("keepdim", first + 1)):
        arg = argument(call, keyword, position) or (
            argument(call, "axis", None) if keyword == "dim" else None
        )
        if arg is not None:
            equal = cst.AssignEqual(whitespace_before=_NO_SPACE, whitespace_after=_NO_SPACE)
            dims.append(cst.Arg(arg.value, keyword=cst.Name(keyword), equal=equal))
    return dims


def _is_two(expr: cst.BaseExpression) -> bool:
    if isinstance(expr, cst.Integer):
        return expr.evaluated_value == 2
    return isinstance(expr, cst.Float) and float(expr.value) == 2.0
