"""GF304 acos-at-unit."""

from __future__ import annotations

import ast
from dataclasses import dataclass

import libcst as cst

from gradfix.edits import Editor
from gradfix.rule import Edit, FixAvailability, FixPlan, FixSafety, Invalid, Rule, Valid
from gradfix.semantic import Semantic
from gradfix.semantic.syntax import argument
from gradfix.unsafe_branch import (
    ACOS,
    ASIN,
    assigned_value,
    expression_node,
    is_pure,
    literal_number,
    may_require_grad,
    same_value,
    strip_parens,
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
    An angle assigned to a name that nothing reads is not reported (no gradient goes
    through it).

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
    Fixed when the angle only feeds the cosine of a literal multiple of it, as
    angular-margin losses (SphereFace, A-Softmax) compute `cos(m * theta)`: `torch.cos(n *
    theta)`, `(theta * n).cos()`, with `n` from 1 to 4, directly on the `acos` or through a
    name every read of which is such a cosine. `cos(n * acos(c))` is the Chebyshev polynomial
    `T_n(c)`, written out in `c`:
    ```python
    theta = cos_theta.acos()
    cos_2_theta = torch.cos(2 * theta)
    # becomes
    cos_2_theta = 2 * cos_theta ** 2 - 1
    ```
    (`4 * c ** 3 - 3 * c`, `8 * c ** 4 - 8 * c ** 2 + 1` for 3 and 4). Safe: the values
    are the same to rounding on [-1, 1], and the gradient is the polynomial's, finite and
    equal to the true derivative everywhere, where the chain through `acos` gave `nan` at ±1.
    The angle's line is removed when a name held it (kept, unused, when a comment is on or above
    it); `c` must read the same at the cosine (no name in it bound again in between), and
    be free of random or unknown calls when the polynomial reads it twice.

    No fix otherwise: a clamp away from ±1 changes the forward value for aligned vectors
    (the angle becomes `acos(1 - eps)`, not 0), and `atan2` rounds differently; which one
    fits is the author's choice. `asin` is never fixed.
    """

    code = "GF304"
    calls = frozenset({"acos", "arccos", "asin", "arcsin"})
    name = "acos-at-unit"
    synopsis = (
        "Finds `acos` / `asin` of a value that reaches ±1, where the derivative is "
        "infinite, and rewrites `cos(n * acos(c))` to its polynomial in `c`."
    )
    message = (
        "`acos`/`asin` of a value that reaches ±1 (clamped to [-1, 1] or a cosine): its "
        "derivative is infinite there, so the gradient is `nan`/`inf` for aligned vectors; "
        "clamp to [-1 + eps, 1 - eps] or avoid the angle"
    )
    fix_safety = FixSafety.SAFE
    fix_availability = FixAvailability.SOMETIMES

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
                    return 2 * cos ** 2 - 1
            """,
        ),
        Invalid(
            """
            from torch import acos, cos
            import torch.nn as nn

            class SphereMargin(nn.Module):
                def forward(self, cos_theta, margin_scale):
                    c = cos_theta.clamp(-1, 1)
                    theta = acos(c)
                    k = (3 * theta / 3.14159265).floor()  # the angle read elsewhere: no fix
                    return cos(3 * theta) * margin_scale - 2 * k
            """,
            report_only=True,
        ),
        Invalid(
            """
            import torch

            def margin_logits(cos_theta, scale):
                # SphereFace with m = 3 and m = 4 on the same clamped cosine
                c = cos_theta.clamp(-1.0, 1.0)
                theta = c.acos()
                return scale * (torch.cos(3 * theta) + (theta * 4).cos())


            margin_logits(torch.rand(4, requires_grad=True), 30.0)
            """,
            """
            import torch

            def margin_logits(cos_theta, scale):
                # SphereFace with m = 3 and m = 4 on the same clamped cosine
                c = cos_theta.clamp(-1.0, 1.0)
                return scale * ((4 * c ** 3 - 3 * c) + (8 * c ** 4 - 8 * c ** 2 + 1))


            margin_logits(torch.rand(4, requires_grad=True), 30.0)
            """,
        ),
        Invalid(
            """
            import torch

            def margin_logits(cos_theta, scale):
                # the clamp would run once per read of `c` in the polynomial: no fix
                theta = cos_theta.clamp(-1.0, 1.0).acos()
                return scale * torch.cos(3 * theta)


            margin_logits(torch.rand(4, requires_grad=True), 30.0)
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
            theta.sum().backward()
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
        if self._never_read(node):
            return  # an angle nothing reads puts no gradient through acos
        if may_require_grad(use.argument, node, self.analysis):
            fix = self._polynomial_fix(node, use.argument) if use.function is ACOS else None
            self.report(node, fix=fix)

    # -- the fix: cos(n * acos(c)) is the Chebyshev polynomial T_n(c) -------------------------
    def _polynomial_fix(self, node: ast.Call, cosine: ast.expr) -> FixPlan | None:
        """Each ``cos(n * acos(c))`` written as ``T_n(c)`` when every read of the angle is
        one; the angle's own line goes when a name held it, unless it holds a comment."""
        uses = self._angle_uses(node)
        if not uses:
            return None
        reads = sum(_POLYNOMIALS[use.multiple].count("{c}") for use in uses)
        if reads > 1 and not is_pure(cosine, self.analysis):
            return None  # `c` is evaluated once per read
        if any(not same_value(cosine, node, cosine, use.call, self.analysis) for use in uses):
            return None  # a name in `c` is bound again between the angle and its use
        # a name held the angle: its line goes
        named = _cos_call_of(node, self.analysis) is None
        removable = self.analysis.enclosing_statement(node) if named else None

        def build(editor: Editor) -> list[Edit]:
            value = expression_node(editor, cosine)
            edits = [Edit(editor.node(use.call), _chebyshev(use, value, editor)) for use in uses]
            if removable is not None:
                line = editor.statement(removable)
                # a line with a comment stays (nothing reads the angle: no gradient)
                alone = isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1
                if alone and "#" not in editor.code(line):
                    edits.append(Edit(line, cst.RemovalSentinel.REMOVE))
            return edits

        multiples = ", ".join(sorted({str(use.multiple) for use in uses}))
        return self.plan(build, f"Write `cos({multiples} * acos(c))` as a polynomial of `c`")

    def _angle_uses(self, node: ast.Call) -> list[_AngleUse]:
        """The ``cos(n * angle)`` reading the angle ``node`` computes: ``node`` itself in
        one, or every read of the name it is assigned to (none if one read is another)."""
        analysis = self.analysis
        direct = _cos_call_of(node, analysis)
        if direct is not None:
            return [direct]
        name = _assigned_name(node, analysis)
        if name is None:
            return []
        statement = analysis.enclosing_statement(node)
        scope = analysis.scope_of(node).node
        uses = []
        for other in analysis.name_nodes_in(scope, name.id):
            if other is name:
                continue
            read = type(other.ctx) is ast.Load
            if not read or analysis.reaching_binding(other, other) is None:
                return []
            binding = analysis.reaching_binding(other, other)
            use = _cos_call_of(other, analysis)
            if binding is None or binding.node is not statement or use is None:
                return []
            uses.append(use)
        return uses

    def _never_read(self, node: ast.Call) -> bool:
        """``theta = c.acos()`` and no read of ``theta`` anywhere in its scope."""
        name = _assigned_name(node, self.analysis)
        if name is None:
            return False
        scope = self.analysis.scope_of(node).node
        return all(other is name for other in self.analysis.name_nodes_in(scope, name.id))

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


#: ``cos(n * acos(c))`` as a polynomial of ``c`` (Chebyshev's ``T_n``), as angular-margin
#: losses (SphereFace, A-Softmax) write it for their margins 1 to 4.
_POLYNOMIALS = {
    1: "{c}",
    2: "2 * {c} ** 2 - 1",
    3: "4 * {c} ** 3 - 3 * {c}",
    4: "8 * {c} ** 4 - 8 * {c} ** 2 + 1",
}
#: Where the polynomial stands without parentheses: a whole right-hand side or argument.
_BARE_PARENTS = (ast.Assign, ast.AnnAssign, ast.Return, ast.Expr, ast.keyword, ast.Call)


@dataclass(frozen=True)
class _AngleUse:
    """``call`` is ``cos(multiple * angle)`` (``torch.cos`` or the method)."""

    call: ast.Call
    multiple: int
    bare: bool  # the polynomial needs no parentheses where the call stands


def _assigned_name(node: ast.expr, analysis: Semantic) -> ast.Name | None:
    """``theta`` for ``theta = <node>`` (a single plain name)."""
    parent = analysis.parent(node)
    if type(parent) is not ast.Assign or parent.value is not node or len(parent.targets) != 1:
        return None
    target = parent.targets[0]
    return target if type(target) is ast.Name else None


def _cos_call_of(angle: ast.expr, analysis: Semantic) -> _AngleUse | None:
    """The ``cos(n * angle)`` call around ``angle``, ``n`` a literal integer from 1 to 4."""
    multiple, inner = 1, angle
    parent = analysis.parent(angle)
    if type(parent) is ast.BinOp and type(parent.op) is ast.Mult:
        other = parent.right if parent.left is angle else parent.left
        number = literal_number(other) if type(other) is ast.Constant else None
        if number is None or number != int(number) or type(other.value) is bool:  # type: ignore[attr-defined]
            return None
        multiple, inner, parent = int(number), parent, analysis.parent(parent)
    if type(parent) is ast.Attribute and parent.attr == "cos":  # `(2 * theta).cos()`
        parent = analysis.parent(parent)
    if multiple not in _POLYNOMIALS or type(parent) is not ast.Call:
        return None
    if parent.keywords or any(type(a) is ast.Starred for a in parent.args):
        return None
    if not _cosine_of(parent, inner, analysis):
        return None
    bare = isinstance(analysis.parent(parent), _BARE_PARENTS)
    return _AngleUse(parent, multiple, bare)


def _cosine_of(call: ast.Call, angle: ast.expr, analysis: Semantic) -> bool:
    """``call`` is ``torch.cos(angle)`` or ``angle.cos()``."""
    if analysis.call_name(call) == "torch.cos":
        return len(call.args) == 1 and call.args[0] is angle
    func = call.func
    if type(func) is not ast.Attribute or func.attr != "cos" or call.args:
        return False
    return func.value is angle and analysis.qualified_name(func) is None


def _chebyshev(use: _AngleUse, cosine: cst.BaseExpression, editor: Editor) -> cst.BaseExpression:
    """``T_n(cosine)`` as an expression, spelled with ``cosine``'s own text."""
    value = strip_parens(cosine)
    text = editor.code(value)
    if not isinstance(value, (cst.Name, cst.Attribute, cst.Subscript, cst.Call)):
        text = f"({text})"
    polynomial = _POLYNOMIALS[use.multiple].format(c=text)
    if not use.bare and use.multiple > 1:
        polynomial = f"({polynomial})"
    return cst.parse_expression(polynomial)
