"""GF302 where-unsafe-branch."""

from __future__ import annotations

import ast

from gradfix.edits import Editor
from gradfix.index_after import finite_entries_of, nonfinite_entries_of
from gradfix.rule import Edit, FixAvailability, FixSafety, Invalid, Rule, Valid
from gradfix.semantic.syntax import argument
from gradfix.unsafe_branch import (
    UnsafeUse,
    expression_node,
    guard,
    is_pure,
    parse_condition,
    same_value,
    singular_indirect,
    singular_uses,
    strip_parens,
)


class WhereUnsafeBranch(Rule):
    """
    ## What it does
    Finds `torch.where(cond, a, b)` whose branch applies a function that is singular
    where `cond` discards it (`torch.where(d > 0, torch.sqrt(d), 0)`,
    `torch.where(c != 0, 1 / c, 0)`, `torch.where(p > 0, p * torch.log(p), 0)`), and
    guards the function's input with a second `torch.where` (the "double where").

    Unsafe functions: `sqrt`, `rsqrt`, `log`, `log2`, `log10` (at 0 and below), `log1p`
    (at -1 and below), `x ** p` / `pow` / `float_power` with `p < 1` or a fractional or
    tensor exponent, `reciprocal` and division by `x` (at 0), `acos`, `asin`, `atanh` (at
    ±1 and beyond), as torch functions or tensor methods (`x.sqrt()`, `x.pow(0.5)`).
    Overflowing functions too: `exp`, `expm1` (above 88.7, where `float32` overflows to
    `inf`) and `exp2` (above 128): `torch.where(x > 0, x + 1, torch.exp(x))` at `x = 100`
    back-propagates `0 * inf = nan` from the discarded `exp`.

    Precision rule: the condition must test the unsafe function's own input (the same
    expression with the same bindings, directly, through `abs()` or negated, possibly via
    a name bound to the condition or combined with `&`, `|`, `~`), and the region it
    discards for that branch must contain a singular input (literal bounds are checked
    exactly; any other bound is assumed to sit at the singular point). Masks about
    something else (`attention_mask`, padding, labels), branches without an unsafe
    function (`torch.where(mask, x, torch.finfo(x.dtype).min)`), inputs already guarded
    (`torch.sqrt(d.clamp(min=1e-12))`, an inner `where`) and code under `torch.no_grad()`
    are not reported. The branch must be shown to require grad (it derives from a
    parameter, a tensor created with `requires_grad=True`, an input of `nn.Module.forward`,
    or a function argument that a call in the same file passes such a tensor): counts,
    filters and quantisation scales computed from data are not reported.

    Also reported, without a fix: `torch.where(torch.isnan(r), 0, r)` (or
    `torch.where(r.isfinite(), r, 0)`) where `r` was computed, by an op that requires grad,
    from data holding `nan`: the values are replaced, but `r`'s backward still runs at
    those positions with gradient 0, and `0 * nan = nan` reaches its other inputs. The
    inputs must be masked before the op (which ones hold `nan` is the author's knowledge).
    A leaf holding `nan` passed through the `where` is fine.

    ## Why is this bad?
    `torch.where` computes both branches and back-propagates into both; the gradient of
    the unselected branch is multiplied by 0, and `0 * inf = nan`, `0 * nan = nan`. So
    `torch.sqrt(d)` at `d <= 0`, `1 / c` at `c == 0` or `log(p)` at `p == 0` put `nan` in
    the gradient even though the forward result is fine. Both branches are
    differentiated whatever the mask means, so a mask that "excludes the bad points"
    does not help.

    ## Example
    ```python
    d = torch.tensor([-1.0, 0.25, 4.0], requires_grad=True)
    y = torch.where(d > 0, torch.sqrt(d), 0)
    y.sum().backward()
    d.grad  # tensor([   nan, 1.0000, 0.2500])
    ```

    ## Use instead
    ```python
    y = torch.where(d > 0, torch.sqrt(torch.where(d > 0, d, torch.ones_like(d))), 0)
    ```
    The inner `where` feeds the unsafe function a harmless value (1; 0 for `acos`,
    `asin`, `atanh`, `exp`, `expm1`, `exp2`) exactly where its result is discarded.

    ## Fix safety
    Safe: the kept positions see the same input, so forward values and dtypes do not
    change, and the discarded positions' values never reach the result. Unsafe when the
    condition calls something that may not give the same value twice (random or unknown
    functions), since the fix evaluates it again. A branch that is a name bound earlier
    (`s = torch.sqrt(d)`, then `torch.where(d > 0, s, 0)`) is reported without a fix:
    the guard belongs where `s` is computed, and `s` may be used elsewhere.
    """

    code = "GF302"
    calls = frozenset({"where"})
    name = "where-unsafe-branch"
    synopsis = (
        "Finds `torch.where(cond, a, b)` whose discarded branch is singular or "
        "overflows, giving `nan` gradients, and guards that branch's input."
    )
    message = (
        "`torch.where` branch is singular where it is masked out (`0 * inf = nan` in its "
        "gradient); guard its input with an inner `torch.where`"
    )
    fix_safety = FixSafety.SAFE
    fix_availability = FixAvailability.SOMETIMES
    fix_safeties = (FixSafety.SAFE, FixSafety.UNSAFE)

    VALID = [
        Valid(
            """
            import torch

            def stability(mask_logits, delta):
                # counts of comparisons: data, nothing to differentiate
                area_i = torch.sum(mask_logits > delta, dim=-1).float()
                area_u = torch.sum(mask_logits > -delta, dim=-1).float()
                return torch.where(area_u > 0, area_i / area_u, 1.0)
            """
        ),
        Valid(
            """
            import torch

            def mask_scores(scores, mask):
                return torch.where(mask, scores, torch.finfo(scores.dtype).min)
            """
        ),
        Valid(
            """
            import torch

            def safe_sqrt(d):
                d_safe = torch.where(d > 0, d, torch.ones_like(d))
                a = torch.where(d > 0, torch.sqrt(d_safe), 0)
                b = torch.where(d > 0, torch.sqrt(torch.where(d > 0, d, torch.ones_like(d))), 0)
                return a + b + torch.where(d > 0, d.clamp(min=1e-12).sqrt(), 0)
            """
        ),
        Valid(
            """
            import torch

            def masked_log_probs(probs, attention_mask):
                return torch.where(attention_mask.bool(), torch.log(probs), 0.0)
            """
        ),
        Valid(
            """
            import torch

            depth = torch.rand(4, 4)
            inverse_depth = torch.where(depth > 0, 1 / depth, 0)
            """
        ),
        Valid(
            """
            import torch

            def splus(x):
                # exp's input is capped where the branch is discarded: no overflow
                return torch.where(x > 20, x, torch.log1p(torch.exp(x.clamp(max=20))))
            """
        ),
        Valid(
            """
            import torch

            def clipped_root(x):
                # the singular inputs (x <= 0) are on the selected side: no masked gradient
                return torch.where(x > 1, x, torch.sqrt(x))
            """
        ),
        Valid(
            """
            import torch

            scores = torch.tensor([1.0, float("nan")], requires_grad=True)
            # a leaf: the where's backward gives it 0 at the nan entry, nothing else runs
            cleaned = torch.where(scores.isnan(), 0.0, scores)
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch

            def height(d):
                h = torch.where(d > 0, torch.sqrt(d), 0)
                return h


            height(torch.rand(4, requires_grad=True))
            """,
            """
            import torch

            def height(d):
                h = torch.where(d > 0, torch.sqrt(torch.where(d > 0, d, torch.ones_like(d))), 0)
                return h


            height(torch.rand(4, requires_grad=True))
            """,
        ),
        Invalid(
            """
            import torch

            def inverse(c):
                return torch.where(c != 0, 1 / c, 0)


            inverse(torch.rand(4, requires_grad=True))
            """,
            """
            import torch

            def inverse(c):
                return torch.where(c != 0, 1 / torch.where(c != 0, c, torch.ones_like(c)), 0)


            inverse(torch.rand(4, requires_grad=True))
            """,
        ),
        Invalid(
            """
            import torch as th

            def entropy(p):
                e = th.where(p > 0, p * p.log(), 0.0)
                return -e.sum()


            entropy(th.rand(4, requires_grad=True))
            """,
            """
            import torch as th

            def entropy(p):
                e = th.where(p > 0, p * th.where(p > 0, p, th.ones_like(p)).log(), 0.0)
                return -e.sum()


            entropy(th.rand(4, requires_grad=True))
            """,
        ),
        Invalid(
            """
            import torch

            def srgb_encode(x):
                return torch.where(
                    x <= 0.0031308,
                    12.92 * x,
                    1.055 * x.pow(1 / 2.4) - 0.055,
                )


            srgb_encode(torch.rand(4, requires_grad=True))
            """,
            """
            import torch

            def srgb_encode(x):
                return torch.where(
                    x <= 0.0031308,
                    12.92 * x,
                    1.055 * torch.where(x <= 0.0031308, torch.ones_like(x), x).pow(1 / 2.4) - 0.055,
                )


            srgb_encode(torch.rand(4, requires_grad=True))
            """,
        ),
        Invalid(
            """
            import torch

            def angle(c):
                ok = c.abs() < 1
                a = torch.where(ok, torch.acos(c), 0.0)
                return a


            angle(torch.rand(4, requires_grad=True))
            """,
            """
            import torch

            def angle(c):
                ok = c.abs() < 1
                a = torch.where(ok, torch.acos(torch.where(ok, c, torch.zeros_like(c))), 0.0)
                return a


            angle(torch.rand(4, requires_grad=True))
            """,
        ),
        Invalid(
            """
            import torch

            def weighted(w, targets):
                r = w * targets  # targets hold nan where a label is missing
                return torch.where(torch.isnan(r), 0.0, r).sum()


            weighted(torch.rand(4, requires_grad=True), torch.rand(4))
            """,
            report_only=True,
        ),
        Invalid(
            """
            import torch

            def splus(x):
                big = x > 20
                return torch.where(big, x, x.exp().log1p())


            splus(torch.rand(4, requires_grad=True))
            """,
            """
            import torch

            def splus(x):
                big = x > 20
                return torch.where(big, x, torch.where(big, torch.zeros_like(x), x).exp().log1p())


            splus(torch.rand(4, requires_grad=True))
            """,
        ),
        Invalid(
            """
            import torch

            def root(d):
                s = torch.sqrt(d)
                return torch.where(d > 0, s, 0)


            root(torch.rand(4, requires_grad=True))
            """,
            report_only=True,
        ),
        Invalid(
            """
            import torch


            def root(d):
                # unsafe: the fix evaluates `cut()` twice
                return torch.where(
                    d > cut(), torch.sqrt(d), 0
                )


            def cut():
                return 0.1


            root(torch.rand(4, requires_grad=True))
            """,
            """
            import torch


            def root(d):
                # unsafe: the fix evaluates `cut()` twice
                return torch.where(
                    d > cut(), torch.sqrt(torch.where(d > cut(), d, torch.ones_like(d))), 0
                )


            def cut():
                return 0.1


            root(torch.rand(4, requires_grad=True))
            """,
        ),
    ]

    def visit_Call(self, node: ast.Call) -> None:
        if self.analysis.call_name(node) != "torch.where":
            return
        condition_arg = argument(node, "condition", 0)
        kept = argument(node, "input", 1)
        other = argument(node, "other", 2)
        if condition_arg is None or kept is None or other is None:
            return
        if self.analysis.in_no_grad(node):
            return
        if self._replaces_nan_of_computed(node, condition_arg, kept, other):
            self.report(node, _NAN_MESSAGE)
            return
        condition = parse_condition(condition_arg, node, self.analysis)
        branches = ((kept, True), (other, False))
        found = [
            (use, kept_when)
            for branch, kept_when in branches
            for use in singular_uses(branch, kept_when, condition, node, self.analysis)
        ]
        if found:
            self._report_fix(node, condition_arg, found)
        elif any(singular_indirect(b, k, condition, node, self.analysis) for b, k in branches):
            self.report(node)

    def _replaces_nan_of_computed(
        self, node: ast.Call, condition: ast.expr, kept: ast.expr, other: ast.expr
    ) -> bool:
        """`torch.where(torch.isnan(r), 0, r)` (or `where(isfinite(r), r, 0)`) where `r` is
        computed by an op whose backward still runs at the nan positions."""
        analysis = self.analysis
        nan_of = nonfinite_entries_of(condition, node, analysis)
        finite_of = None if nan_of is not None else finite_entries_of(condition, node, analysis)
        tested, passed = (nan_of, other) if nan_of is not None else (finite_of, kept)
        if tested is None or type(passed) is not ast.Name:
            return False
        if not same_value(tested, node, passed, node, analysis):
            return False
        binding = analysis.reaching_binding(passed, node)
        if binding is None or binding.kind != "assign" or binding.unpack_index is not None:
            return False
        computed = binding.value
        if type(computed) is not ast.BinOp and type(computed) is not ast.Call:
            return False
        if type(computed) is ast.Call and (analysis.call_name(computed) or "") in _NAN_SAFE:
            return False
        return analysis.requires_grad(computed, binding.node)

    def _report_fix(
        self, node: ast.Call, condition: ast.expr, found: list[tuple[UnsafeUse, bool]]
    ) -> None:
        # An input that contains another unsafe call is guarded as a whole.
        outer = [
            (use, kept_when)
            for use, kept_when in found
            if not any(_inside(use.node, other.argument) for other, _ in found if other is not use)
        ]

        def build(editor: Editor) -> list[Edit]:
            selector = strip_parens(expression_node(editor, condition))
            edits = []
            for use, kept_when in outer:
                argument = expression_node(editor, use.argument)
                guarded = guard(argument, use.function, selector, kept_when, editor)
                edits.append(Edit(argument, guarded))
            return edits

        safety = None if is_pure(condition, self.analysis) else FixSafety.UNSAFE
        imports = () if self.analysis.torch_alias() else ("torch",)
        names = ", ".join(sorted({use.function.name for use, _ in outer}))
        description = f"Guard the input of {names} with an inner `torch.where`"
        fix = self.plan(build, description, safety=safety, imports=imports)
        self.report(node, fix=fix)


_NAN_MESSAGE = (
    "`torch.where` replaces the `nan` values of a computed tensor but not its `nan` "
    "gradient: the op's backward still runs there (`0 * nan = nan`); mask the op's "
    "inputs before computing it"
)
#: Calls whose backward at a nan output does not turn a 0 gradient into nan: tensors made
#: from data, leaves.
_NAN_SAFE = frozenset(
    "torch.tensor torch.as_tensor torch.from_numpy torch.zeros torch.ones torch.full "
    "torch.empty torch.randn torch.rand".split()
)


def _inside(node: ast.AST, tree: ast.AST) -> bool:
    return any(child is node for child in ast.walk(tree))
