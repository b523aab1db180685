"""GF304 acos-at-unit."""

from __future__ import annotations

import ast

from gradfix.rule import FixAvailability, FixSafety, Invalid, Rule, Valid
from gradfix.semantic.syntax import argument
from gradfix.unsafe_branch import (
    ACOS,
    ASIN,
    assigned_value,
    literal_number,
    may_require_grad,
    unsafe_use,
)

#: Functions that return a cosine: exactly ±1 for parallel vectors.
_COSINES = frozenset({"torch.nn.functional.cosine_similarity", "torch.cosine_similarity"})
_CLAMPS = frozenset({"clamp", "clip", "clamp_", "clip_"})


class AcosAtUnit(Rule):
    """
    ## What it does
    Finds `acos` / `asin` (`torch.acos`, `torch.arccos`, `x.acos()`, ...) of a value that
    reaches ±1 by construction: a value clamped to a range that includes 1 or -1
    (`c.clamp(-1, 1)`, `torch.clamp(c, min=-1.0, max=1.0)`), or a cosine similarity
    (`F.cosine_similarity(a, b)`), directly or through a name. The value must be one that
    may require grad (as for GF303: a tensor created with `requires_grad=True`, an input of
    a module method, or a helper's argument that a call in the file passes such a tensor).
    Reported without a fix.

    ## Why is this bad?
    `acos'(x) = -1 / sqrt(1 - x ** 2)` is infinite at ±1: an angle between two aligned
    vectors (a prediction equal to its target, a sample parallel to its class vector) gets
    an `inf` or `nan` gradient, and the next optimizer step poisons every parameter.
    Clamping to [-1, 1] only keeps the forward finite: the clamp passes the gradient
    through at its bounds, so the infinite derivative still arrives.

    ## Example
    ```python
    def angle_between(u, v):
        cos = (u / u.norm()).dot(v / v.norm())
        return cos.clamp(-1.0, 1.0).acos()  # nan gradient when u and v are parallel
    ```

    ## Use instead
    ```python
    eps = 1e-7
    return cos.clamp(-1.0 + eps, 1.0 - eps).acos()
    ```
    or avoid the angle: `torch.atan2(torch.linalg.cross(u, v).norm(), u.dot(v))` has a
    finite gradient for parallel vectors, and a cosine of a multiple of the angle is a
    polynomial of the cosine (`cos(2 * acos(c)) == 2 * c ** 2 - 1`).

    ## Fix safety
    No fix: a clamp away from ±1 changes the forward value for aligned vectors (the angle
    becomes `acos(1 - eps)`, not 0), and `atan2` or a polynomial rewrite rounds
    differently; which one fits is the author's choice.
    """

    code = "GF304"
    name = "acos-at-unit"
    message = (
        "`acos`/`asin` of a value that reaches ±1 (clamped to [-1, 1] or a cosine): its "
        "derivative is infinite there, so the gradient is `nan`/`inf` for aligned vectors; "
        "clamp to [-1 + eps, 1 - eps] or avoid the angle"
    )
    fix_safety = FixSafety.SAFE
    fix_availability = FixAvailability.NEVER

    VALID = [
        Valid(
            """
            import torch

            def angle(u, v):
                cos = (u / u.norm()).dot(v / v.norm())
                return cos.clamp(-1 + 1e-7, 1 - 1e-7).acos()


            angle(torch.rand(3, requires_grad=True), torch.rand(3))
            """
        ),
        Valid(
            """
            import torch

            # data only: no gradient flows through the angle
            a, b = torch.rand(3), torch.rand(3)
            theta = torch.cosine_similarity(a, b, dim=0).acos()
            """
        ),
        Valid(
            """
            import torch

            def phase(x):
                return torch.acos(x.clamp(-0.5, 0.5))


            phase(torch.rand(3, requires_grad=True))
            """
        ),
        Valid(
            """
            import torch

            w = torch.rand(3, requires_grad=True)
            with torch.no_grad():
                theta = w.clamp(-1, 1).acos()
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch

            def angle_between(u, v):
                cos = (u / u.norm()).dot(v / v.norm())
                return cos.clamp(-1.0, 1.0).acos()


            angle_between(torch.rand(3, requires_grad=True), torch.rand(3))
            """,
            report_only=True,
        ),
        Invalid(
            """
            import torch as th
            import torch.nn as nn
            import torch.nn.functional as F

            class AngularMargin(nn.Module):
                def __init__(self, classes, dim):
                    super().__init__()
                    self.weight = nn.Parameter(th.randn(classes, dim))

                def forward(self, x):
                    cos = F.cosine_similarity(x.unsqueeze(1), self.weight, dim=-1)
                    theta = th.arccos(cos)
                    return th.cos(2 * theta)
            """,
            report_only=True,
        ),
        Invalid(
            """
            import torch

            x = torch.randn(4, 3, requires_grad=True)
            w = torch.randn(3, 2, requires_grad=True)
            cos = (x @ w / x.norm(dim=1, keepdim=True) / w.norm(dim=0)).clamp(min=-1, max=1)
            theta = torch.asin(cos)
            """,
            report_only=True,
        ),
    ]

    def visit_Call(self, node: ast.Call) -> None:
        use = unsafe_use(node, self.analysis)
        if use is None or use.function not in (ACOS, ASIN):
            return
        if not self._reaches_unit(use.argument, node, 0) or self.analysis.in_no_grad(node):
            return
        if may_require_grad(use.argument, node, self.analysis):
            self.report(node)

    def _reaches_unit(self, expr: ast.expr, at: ast.AST, depth: int) -> bool:
        """``expr`` is ±1 somewhere by construction: a clamp whose range holds 1 or -1,
        or a cosine similarity (through names bound to them)."""
        if depth > 4:
            return False
        if type(expr) is ast.Name:
            assigned = assigned_value(expr, at, self.analysis)
            if assigned is None:
                return False
            value, bound_at = assigned
            return self._reaches_unit(value, bound_at, depth + 1)
        if type(expr) is not ast.Call:
            return False
        name = self.analysis.call_name(expr)
        if name in _COSINES:
            return True
        bounds = _clamp_bounds(expr, name)
        if bounds is None:
            return False
        low, high = bounds
        return (low is not None and low <= -1.0 <= (high if high is not None else 1.0)) or (
            high is not None and high >= 1.0 >= (low if low is not None else -1.0)
        )


def _clamp_bounds(call: ast.Call, name: str | None) -> tuple[float | None, float | None] | None:
    """The literal ``(min, max)`` of a clamp call (None for a bound not given); None when
    ``call`` is not a clamp or a bound is not a number."""
    if name is not None:
        if name not in ("torch.clamp", "torch.clip"):
            return None
        low_arg, high_arg = argument(call, "min", 1), argument(call, "max", 2)
    elif type(call.func) is ast.Attribute and call.func.attr in _CLAMPS:
        low_arg, high_arg = argument(call, "min", 0), argument(call, "max", 1)
    else:
        return None
    low = literal_number(low_arg) if low_arg is not None else None
    high = literal_number(high_arg) if high_arg is not None else None
    if (low_arg is not None and low is None) or (high_arg is not None and high is None):
        return None
    return low, high
