"""GF303 sqrt-of-squares."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Sequence
from typing import TypeGuard

import libcst as cst

from gradfix.edits import Editor, cst_argument, with_argument
from gradfix.index_after import mean_squared_error
from gradfix.rule import (
    Edit,
    FixAvailability,
    FixPlan,
    FixSafety,
    Invalid,
    Rule,
    RuleContext,
    Valid,
)
from gradfix.semantic.syntax import (
    CallArgument,
    argument,
    call_arguments,
    is_unpacked,
)
from gradfix.unsafe_branch import (
    double_where,
    expression_node,
    is_pure,
    may_require_grad,
    strip_parens,
)

#: Expressions safe to read twice in ``x * x`` (no side effect, no fresh random values).
_PURE = (ast.Name, ast.Attribute, ast.Subscript)


def _needs_parens() -> tuple[type[cst.BaseExpression], ...]:
    """Expressions that keep their parentheses to stay one call argument."""
    return (cst.Tuple, cst.NamedExpr, cst.GeneratorExp)


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
    A sum of separate squares, `torch.sqrt(dx ** 2 + dy ** 2)`, becomes the norm of the
    stacked values, `torch.linalg.vector_norm(torch.stack(torch.broadcast_tensors(dx, dy)),
    dim=0)` (`torch.hypot` has the same `nan` gradient at 0); reported when every term is
    a tensor (a number among them keeps the sum away from 0) and one is shown to require
    grad.
    An RMSE, `torch.sqrt(F.mse_loss(a, b))` or the `sqrt` of an `nn.MSELoss()` module's
    result, has the same `nan` once the error is exactly 0 (`inf * 0` through the loss).
    The error is computed once on a line of its own and its root taken behind a "double
    where" (the guard of GF302 where-unsafe-branch):
    ```python
    mse = criterion(pred, target)
    rmse = torch.where(mse > 0, torch.sqrt(torch.where(mse > 0, mse, torch.ones_like(mse))), 0)
    ```
    Safe: every value is the same (the root of 0 is 0) and the gradient at 0 becomes 0,
    what finite differences give there, instead of `nan`; elsewhere it is unchanged. An eps
    under the root would change the value, and `vector_norm(a - b) / n ** 0.5` only equals
    it to rounding. The name is `mse` (numbered when the file uses it); several RMSEs on
    one line are fixed together (`mse`, `mse2`, in the order they run). Reported without a
    fix when the line cannot take a statement before it (a lambda, a comprehension, an
    `elif` test, several statements on one line), when the root may not run (under `x if c
    else y`, `and`, `or`) or when something else on the line calls an unknown or random
    function, which would then run after the error instead of before.

    The rewrite keeps the forward, so no proof that the tensor requires grad is needed: a
    tensor that may require grad is enough, such as an argument of an `nn.Module` method or
    of a helper that some call in the file passes such a tensor (a distance helper called
    from `forward`). A helper only called with data, or not called in the file outside a
    module class (feature extraction, preprocessing), is not reported.
    """

    code = "GF303"
    calls = frozenset({"sqrt"})
    name = "sqrt-of-squares"
    synopsis = (
        "Finds a Euclidean norm written by hand, `torch.sqrt((x ** 2).sum())`, with a "
        "`nan` gradient at zero, and rewrites it to `torch.linalg.vector_norm`."
    )
    message = "`sqrt` of a sum of squares has a `nan` gradient at 0; use `torch.linalg.vector_norm`"
    fix_safety = FixSafety.SAFE
    fix_availability = FixAvailability.SOMETIMES
    default_enabled = True

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
        Valid(
            """
            import torch

            class Spectrogram:
                def magnitudes(self, stft):
                    return torch.sqrt(stft.pow(2).sum(-1))

                def __call__(self, waveform):
                    return self.magnitudes(torch.stft(waveform, 64, return_complex=False))
            """
        ),
        Valid(
            """
            import torch

            def soft_radius(dx, dy):
                return torch.sqrt(dx ** 2 + dy ** 2 + 1e-12)


            def scale(noise, sigma: float = 0.5):
                return torch.sqrt(noise * noise + sigma * sigma)


            soft_radius(torch.rand(3, requires_grad=True), torch.rand(3))
            scale(torch.rand(3, requires_grad=True))
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            import torch.nn as nn

            def distance(a, b):
                return torch.sqrt(torch.sum(torch.pow(a - b, 2), dim=-1))

            class Triplet(nn.Module):
                def __init__(self, encoder):
                    super().__init__()
                    self.encoder = encoder

                def forward(self, anchor, positive):
                    return distance(self.encoder(anchor), self.encoder(positive)).mean()
            """,
            """
            import torch
            import torch.nn as nn

            def distance(a, b):
                return torch.linalg.vector_norm(a - b, dim=-1)

            class Triplet(nn.Module):
                def __init__(self, encoder):
                    super().__init__()
                    self.encoder = encoder

                def forward(self, anchor, positive):
                    return distance(self.encoder(anchor), self.encoder(positive)).mean()
            """,
        ),
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
        Invalid(
            """
            import torch

            def radius(dx, dy):
                return torch.sqrt(dx * dx + dy ** 2)


            radius(torch.rand(3, requires_grad=True), torch.rand(3))
            """,
            """
            import torch

            def radius(dx, dy):
                return torch.linalg.vector_norm(torch.stack(torch.broadcast_tensors(dx, dy)), dim=0)


            radius(torch.rand(3, requires_grad=True), torch.rand(3))
            """,
        ),
        Invalid(
            """
            import torch
            import torch.nn.functional as F
            from torch import nn

            pred = torch.randn(3, requires_grad=True)
            target = torch.randn(3)
            criterion = nn.MSELoss()
            # nan gradient once pred == target
            r = torch.sqrt(criterion(pred, target))
            rmse_f = F.mse_loss(pred, target).sqrt()
            """,
            """
            import torch
            import torch.nn.functional as F
            from torch import nn

            pred = torch.randn(3, requires_grad=True)
            target = torch.randn(3)
            criterion = nn.MSELoss()
            # nan gradient once pred == target
            mse = criterion(pred, target)
            r = torch.where(mse > 0, torch.sqrt(torch.where(mse > 0, mse, torch.ones_like(mse))), 0)
            mse = F.mse_loss(pred, target)
            rmse_f = torch.where(mse > 0, torch.where(mse > 0, mse, torch.ones_like(mse)).sqrt(), 0)
            """,
        ),
        Invalid(
            """
            import torch
            import torch.nn.functional as F

            w = torch.randn(3, requires_grad=True)
            x, y = torch.randn(8, 3), torch.randn(8)
            # `penalty` runs first on this line: computing the error before it is not proven safe
            loss = penalty(w) + torch.sqrt(F.mse_loss(x @ w, y))
            for batch in [x]:
                rmse = [torch.sqrt(F.mse_loss(b @ w, y[:1])) for b in batch.split(1)]
            # only run when `w` is not None: the error cannot move before the line
            r = torch.sqrt(F.mse_loss(x @ w, y)) if w is not None else None
            """,
            report_only=True,
        ),
    ]

    def __init__(self, context: RuleContext) -> None:
        super().__init__(context)
        # one fix per statement for all its RMSE roots (each alone leaves the others' nan)
        self._rmse_plans: dict[ast.stmt, FixPlan | None] = {}

    def visit_Call(self, node: ast.Call) -> None:
        rooted = self._rooted(node)
        if rooted is not None:
            self._check(node, rooted)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        rooted = self._rooted(node)
        if rooted is not None:
            self._check(node, rooted)

    def _rooted(self, node: ast.AST) -> ast.expr | None:
        """``x`` for ``torch.sqrt(x)``, ``x.sqrt()``, ``x ** 0.5``."""
        if type(node) is ast.Call:
            if self.analysis.call_name(node) == "torch.sqrt":
                if len(node.args) == 1 and not node.keywords:
                    return node.args[0] if type(node.args[0]) is not ast.Starred else None
            elif type(node.func) is ast.Attribute and node.func.attr == "sqrt":
                if not node.args and not node.keywords:
                    return (
                        node.func.value if self.analysis.qualified_name(node.func) is None else None
                    )
        elif type(node) is ast.BinOp and type(node.op) is ast.Pow:
            exponent = node.right
            if type(exponent) is ast.Constant and type(exponent.value) is float:
                return node.left if exponent.value == 0.5 else None
        return None

    def _check(self, node: ast.expr, summed: ast.expr) -> None:
        parts = self._sum_of_squares(summed)
        if parts is None:
            self._check_rmse(node, summed)
            self._check_added_squares(node, summed)
            return
        base, dims = parts
        if not may_require_grad(base, node, self.analysis) or self.analysis.in_no_grad(node):
            return
        self.report(node, fix=None if dims is None else self._fix(node, base, dims))

    def _check_rmse(self, node: ast.expr, mse: ast.expr) -> None:
        """`sqrt(mse_loss(a, b))`: the same `nan` where the error is 0 (`a == b`). The fix
        is the double `where` on the error, computed once on a line of its own
        (`vector_norm(a - b) / n ** 0.5` rounds differently, an eps under the root changes
        the value)."""
        if self._is_rmse(node, mse):
            self.report(node, _RMSE_MESSAGE, fix=self._rmse_fix(node))

    def _is_rmse(self, node: ast.expr, mse: ast.expr) -> TypeGuard[ast.Call]:
        if type(mse) is not ast.Call or self.analysis.in_no_grad(node):
            return False
        inputs = mean_squared_error(mse, node, self.analysis)
        return bool(inputs) and any(may_require_grad(i, node, self.analysis) for i in inputs)

    def _rmse_fix(self, node: ast.expr) -> FixPlan | None:
        """``mse = <the error>`` on its own line before the statement, then
        ``torch.where(mse > 0, torch.sqrt(torch.where(mse > 0, mse, torch.ones_like(mse))),
        0)``: the same value everywhere, and a gradient of 0 (the subgradient) at 0; every
        RMSE of the statement in one fix (``mse``, ``mse2``, ... in the order they run)."""
        statement = self.analysis.enclosing_statement(node)
        if statement is None:
            return None
        if statement not in self._rmse_plans:
            roots = self._rmse_roots(statement)
            hoistable = self._hoistable(roots, statement)
            self._rmse_plans[statement] = self._hoist_plan(roots, statement) if hoistable else None
        return self._rmse_plans[statement]

    def _rmse_roots(self, statement: ast.stmt) -> list[tuple[ast.expr, ast.Call]]:
        """The RMSE roots of ``statement`` and their errors, in source order."""
        roots = []
        for node in ast.walk(statement):
            rooted = self._rooted(node)
            if rooted is not None and self._is_rmse(node, rooted):  # type: ignore[arg-type]
                roots.append((node, rooted))
        return sorted(roots, key=lambda root: self.analysis.index(root[0]))  # type: ignore[arg-type]

    def _hoist_plan(self, roots: list[tuple[ast.expr, ast.Call]], statement: ast.stmt) -> FixPlan:
        names = _fresh_names("mse", len(roots), self.analysis.order)

        def build(editor: Editor) -> list[Edit] | None:
            line = editor.statement(statement)
            if not isinstance(line, cst.SimpleStatementLine) or len(line.body) != 1:
                return None  # ``a = 1; b = sqrt(...)``, ``if c: b = sqrt(...)``
            if not isinstance(editor.parent(line), (cst.IndentedBlock, cst.Module)):
                return None
            hoisted: list[cst.SimpleStatementLine] = []
            guarded: dict[cst.CSTNode, cst.CSTNode] = {}
            for (node, mse), name in zip(roots, names):
                error = expression_node(editor, mse)
                old = expression_node(editor, node)
                assigned = cst.Assign([cst.AssignTarget(cst.Name(name))], strip_parens(error))
                hoisted.append(cst.SimpleStatementLine([assigned]))
                guarded[old] = double_where(old, error, cst.Name(name), editor)
            hoisted[0] = hoisted[0].with_changes(leading_lines=line.leading_lines)
            rewritten = editor.replace_nodes(line, guarded)
            assert isinstance(rewritten, cst.SimpleStatementLine)
            kept = rewritten.with_changes(leading_lines=())
            return [Edit(line, cst.FlattenSentinel([*hoisted, kept]))]

        imports = () if self.analysis.torch_alias() else ("torch",)
        spelled = ", ".join(f"`{name}`" for name in names)
        description = (
            f"Compute the error once ({spelled}) and take its root with a double `torch.where`"
        )
        return self.plan(build, description, imports=imports)

    def _hoistable(self, roots: list[tuple[ast.expr, ast.Call]], statement: ast.stmt) -> bool:
        """The errors can be computed on lines before ``statement``: each root is in the
        statement's own expression and always evaluated (not in a lambda, a comprehension,
        a conditional expression or `and`/`or`), the statement is an assignment, a return
        or an expression in a block, no root holds another, and nothing else the statement
        evaluates calls an unknown or random function (moving the errors first keeps the
        order of what has an effect)."""
        if (
            type(statement) not in _SIMPLE_STATEMENTS
            or self.analysis.statement_block(statement) is None
        ):
            return False
        contains = self.analysis.contains
        for node, _ in roots:
            for ancestor in self.analysis.ancestors(node):
                if ancestor is statement:
                    break
                if type(ancestor) in _NOT_ALWAYS_EVALUATED:
                    return False
            if any(other is not node and contains(node, other) for other, _ in roots):
                return False
        for call in ast.walk(statement):
            if type(call) is not ast.Call or any(
                call is node or contains(mse, call) for node, mse in roots
            ):
                continue
            if not is_pure(ast.Call(func=call.func, args=[], keywords=[]), self.analysis):
                return False
        return True

    def _check_added_squares(self, node: ast.expr, added: ast.expr) -> None:
        """`sqrt(x ** 2 + y ** 2)`: the norm of the stacked values, `nan` gradient where all
        are 0 (so is `torch.hypot`'s)."""
        terms = _added_terms(added)
        bases = [self._squared_base(t) for t in terms] if len(terms) > 1 else []
        if not bases or any(b is None for b in bases) or self.analysis.in_no_grad(node):
            return
        present = [b for b in bases if b is not None]
        # Two values both 0 at once is rarer than a zero vector (and `sqrt(re**2 + im**2)`
        # is common in feature extraction): a proof that one requires grad is needed.
        if not any(self.analysis.requires_grad(b, node) for b in present):
            return
        # a number among the terms (`sigma * sigma`) keeps the sum away from 0
        if all(self.analysis.is_tensor(b, node) for b in present):
            self.report(node, fix=self._stacked_fix(node, present))

    def _stacked_fix(self, node: ast.expr, bases: list[ast.expr]) -> FixPlan:
        def stacked_norm(editor: Editor, old: cst.CSTNode) -> cst.BaseExpression:
            assert isinstance(old, cst.BaseExpression)
            values = []
            for base in bases:
                value = editor.node(base)
                assert isinstance(value, cst.BaseExpression)
                if not isinstance(value, _needs_parens()):
                    value = value.with_changes(lpar=[], rpar=[])
                values.append(cst.Arg(value))
            broadcast = cst.Call(editor.torch_attr("broadcast_tensors"), values)
            stacked = cst.Call(editor.torch_attr("stack"), [cst.Arg(broadcast)])
            norm = editor.torch_attr("linalg.vector_norm")
            call = cst.Call(norm, [cst.Arg(stacked)], lpar=old.lpar, rpar=old.rpar)
            return with_argument(call, "dim", cst.Integer("0"))

        return self.plan_replace(
            node, stacked_norm, "Use `torch.linalg.vector_norm` of the stacked values"
        )

    def _sum_of_squares(
        self, expr: ast.expr
    ) -> tuple[ast.expr, tuple[ast.Call, Dims] | None] | None:
        """``(x, (the sum, its dim/keepdim arguments))`` for ``(x ** 2).sum(...)`` /
        ``torch.sum(x ** 2, ...)``; the second is None when the sum has other arguments
        (``dtype=``)."""
        if type(expr) is not ast.Call:
            return None
        rest: list[CallArgument]
        if self.analysis.call_name(expr) == "torch.sum":
            if not expr.args or type(expr.args[0]) is ast.Starred:
                return None  # a keyword cannot come before a plain positional argument
            squared, rest, first_dim = expr.args[0], call_arguments(expr)[1:], 1
        elif type(expr.func) is ast.Attribute and expr.func.attr == "sum":
            if self.analysis.qualified_name(expr.func) is not None:
                return None
            squared, rest, first_dim = expr.func.value, call_arguments(expr), 0
        else:
            return None
        base = self._squared_base(squared)
        if base is None:
            return None
        dims = _norm_dims(expr, rest, first_dim)
        return base, None if dims is None else (expr, dims)

    def _squared_base(self, expr: ast.expr) -> ast.expr | None:
        """``x`` for ``x ** 2``, ``x * x``, ``x.pow(2)``, ``torch.pow(x, 2)``, ``x.square()``."""
        if type(expr) is ast.BinOp:
            if type(expr.op) is ast.Pow and _is_two(expr.right):
                return expr.left
            if type(expr.op) is ast.Mult and _is_pure(expr.left):
                if self._text(expr.left) == self._text(expr.right):  # as written
                    return expr.left
            return None
        if type(expr) is not ast.Call:
            return None
        if expr.keywords or any(type(a) is ast.Starred for a in expr.args):
            return None
        name = self.analysis.call_name(expr)
        args = expr.args
        if name == "torch.square" and len(args) == 1:
            return args[0]
        if name == "torch.pow" and len(args) == 2 and _is_two(args[1]):
            return args[0]
        func = expr.func
        if type(func) is not ast.Attribute or self.analysis.qualified_name(func) is not None:
            return None
        if func.attr == "square" and not args:
            return func.value
        if func.attr == "pow" and len(args) == 1 and _is_two(args[0]):
            return func.value
        return None

    def _text(self, expr: ast.expr) -> str | None:
        return self.analysis.segment(expr)

    def _fix(self, node: ast.expr, base: ast.expr, sum_dims: tuple[ast.Call, Dims]) -> FixPlan:
        summed, dims = sum_dims

        def vector_norm(editor: Editor, old: cst.CSTNode) -> cst.BaseExpression | None:
            assert isinstance(old, cst.BaseExpression)
            norm = editor.node(base)
            assert isinstance(norm, cst.BaseExpression)
            if not isinstance(
                norm, (cst.Tuple, cst.NamedExpr, cst.GeneratorExp)
            ):  # to stay one argument
                norm = norm.with_changes(lpar=[], rpar=[])
            new = cst.Call(
                editor.torch_attr("linalg.vector_norm"),
                [cst.Arg(norm)],
                lpar=old.lpar,
                rpar=old.rpar,
            )
            # the values from the LibCST sum: ``ast`` ranges of ``(0, 1)`` include the parentheses
            sum_call = cst.ensure_type(editor.node(summed), cst.Call)
            for keyword, given, position in dims:
                value = cst_argument(sum_call, given, position)
                if value is None:
                    return None
                new = with_argument(new, keyword, value.value)
            return new

        return self.plan_replace(node, vector_norm, "Use `torch.linalg.vector_norm`")


_RMSE_MESSAGE = (
    "`sqrt` of a mean squared error (RMSE) has a `nan` gradient where the error is 0; "
    "take the root under a double `torch.where` (`torch.where(mse > 0, torch.sqrt("
    "torch.where(mse > 0, mse, torch.ones_like(mse))), 0)`)"
)
#: Statements an error can be computed before, on a line of its own.
_SIMPLE_STATEMENTS = (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Return, ast.Expr)
#: Expressions a root inside may not be evaluated by (or that have a scope of their own).
_NOT_ALWAYS_EVALUATED = (
    ast.Lambda,
    ast.ListComp,
    ast.SetComp,
    ast.DictComp,
    ast.GeneratorExp,
    ast.IfExp,
    ast.BoolOp,
)


def _fresh_names(wanted: str, count: int, nodes: Iterable[ast.AST]) -> list[str]:
    """``count`` names ``wanted``, ``wanted2``, ... that the file (all its ``nodes``) uses
    for nothing."""
    used: set[str] = set()
    for n in nodes:
        kind = type(n)
        if kind is ast.Name:
            used.add(n.id)  # type: ignore[attr-defined]
        elif kind is ast.arg:
            used.add(n.arg)  # type: ignore[attr-defined]
        elif kind is ast.alias:
            used.add(n.asname or n.name.partition(".")[0])  # type: ignore[attr-defined]
        else:
            used.add(getattr(n, "name", None) or "")
    names: list[str] = []
    counter = 1
    while len(names) < count:
        name = wanted if counter == 1 else f"{wanted}{counter}"
        if name not in used:
            names.append(name)
        counter += 1
    return names


#: The ``dim=`` and ``keepdim=`` of the norm: (its keyword, the sum's keyword, the sum's
#: position) of each (``("dim", "axis", None)`` for ``sum(axis=1)``).
Dims = list[tuple[str, str, int | None]]


def _norm_dims(call: ast.Call, rest: Sequence[CallArgument], first: int) -> Dims | None:
    """The sum's ``dim``/``keepdim`` as keyword arguments, None if it has any other."""
    known = {"dim", "axis", "keepdim"}
    if any(is_unpacked(a) or (type(a) is ast.keyword and a.arg not in known) for a in rest):
        return None
    if len([a for a in rest if type(a) is not ast.keyword]) > 2:
        return None
    dims: Dims = []
    for keyword, position in (("dim", first), ("keepdim", first + 1)):
        if argument(call, keyword, position) is not None:
            dims.append((keyword, keyword, position))
        elif keyword == "dim" and argument(call, "axis", None) is not None:
            dims.append((keyword, "axis", None))
    return dims


def _added_terms(expr: ast.expr) -> list[ast.expr]:
    """The terms of ``a + b + c``."""
    if type(expr) is ast.BinOp and type(expr.op) is ast.Add:
        return _added_terms(expr.left) + _added_terms(expr.right)
    return [expr]


def _is_pure(expr: ast.expr) -> bool:
    """Names, attributes, subscripts and arithmetic of them: ``(a - b) * (a - b)`` reads
    the same value twice."""
    if type(expr) in _PURE:
        return True
    if type(expr) is ast.Constant:
        return True
    if type(expr) is ast.BinOp:
        return _is_pure(expr.left) and _is_pure(expr.right)
    if type(expr) is ast.UnaryOp:
        return _is_pure(expr.operand)
    return False


def _is_two(expr: ast.expr) -> bool:
    if type(expr) is not ast.Constant:
        return False
    return type(expr.value) in (int, float) and expr.value == 2
