"""GF301 masked-unsafe-branch."""

from __future__ import annotations

import ast
import functools
from collections.abc import Callable
from dataclasses import dataclass

import libcst as cst

from gradfix.edits import Editor, as_receiver
from gradfix.index_after import (
    NanMasked,
    SingularIndex,
    ZeroDivisorIndex,
    builds_zero_vector,
    mask_expression,
    nan_data_before_index,
    singular_before_index,
    zero_divisor_before_index,
)
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
from gradfix.unsafe_branch import (
    MASK_TYPES,
    Mask,
    UnsafeUse,
    branch_without,
    complement_of,
    expression_node,
    factors,
    guard,
    is_pure,
    literal_number,
    resolve_mask,
    selector_expression,
    selector_node,
    singular_indirect,
    singular_uses,
    strip_parens,
    unsafe_uses,
    without_factor,
)


class MaskedUnsafeBranch(Rule):
    """
    ## What it does
    Finds mask-weighted blends `mask * a + (1 - mask) * b` (also `~mask * b`, masks on
    either side, and a single `mask * b`) where a branch applies a function that is
    singular where the mask discards it, and rewrites the blend to `torch.where` with a
    guarded input (the "double where"). Unsafe functions are those of GF302: `sqrt`,
    `rsqrt`, `log*`, `x ** p` with `p < 1` or fractional, `pow`, `reciprocal`, division
    by `x`, `acos`, `asin`, `atanh`, as torch functions or tensor methods.

    Precision rule: the mask must provably hold 0/1 (a comparison, `&`/`|`/`~` of
    comparisons, a `.float()`/`.to(...)` of one, or a name bound to one of these) and it
    must test the unsafe function's own input (same expression and bindings, directly,
    through `abs()` or negated), with a discarded region that contains a singular input.
    Soft weights (`lam * a + (1 - lam) * torch.sqrt(v)`), masks about something else
    (`pad_mask * torch.log(p)`), smooth branches (`mask * x ** 2`), inputs already
    guarded (`x.clamp(min=eps) ** 0.5`) and code under `torch.no_grad()` are not
    reported. The branch must be shown to require grad, as for GF302. `0 * f(x)` with an
    unsafe `f` is reported without a fix.

    Also indexing after a singular op (`torch.log(p)[p > 0]`, `(x / d)[d != 0]`, or
    `r = x / d` whose every read is `r[mask]`): indexing selects forward values but the
    op's backward still runs on every position, with gradient 0 where the index dropped
    it. Reported when the mask tests the op's input and drops singular inputs (the same
    precision rule); the fix indexes the input first (`torch.log(p[p > 0])`) when it is
    the op's only tensor, and otherwise guards it with the mask (`x / torch.where(d != 0,
    d, torch.ones_like(d))`, at the op's binding when it is a name). And a loss computed
    on `nan` data then masked (`F.mse_loss(pred, t, reduction="none")[~t.isnan()]`, a
    `nn.MSELoss(reduction="none")` module, or a function of the file returning a
    non-linear elementwise expression of its parameters, `(a - b) ** 2`): the mask must
    keep the finite entries (`~isnan(t)`, `isfinite(t)`, `t == t`) of one of the loss's
    inputs; the fix masks every input first, `loss(pred[m], t[m])`. These rewrites keep
    the forward exactly, so a tensor that may require grad (a function argument) is
    enough. A division by a tensor built from a literal list with zeros whose result
    is only read at plain indices (integers, slices) that miss the zeros (`r = w /
    torch.tensor([1., 0., 1.]); r[0]`) is reported at the division, and the divisor is
    1 where it is 0 (`torch.where(d != 0, d, torch.ones_like(d))`): those positions are
    never read.

    ## Why is this bad?
    Both branches are computed and differentiated; the gradient of the discarded one is
    multiplied by 0, and `0 * inf = nan`. `x ** 0.5` has an infinite derivative at 0, so
    `mask * 12.9 * x + (1 - mask) * x ** 0.5` gives a `nan` gradient at `x == 0` although
    the forward value is right there.

    ## Example
    ```python
    def loss_function(x):
        mask = (x < 0.003).float()
        gamma_x = mask * 12.9 * x + (1 - mask) * (x ** 0.5)
        return torch.mean((x - gamma_x) ** 2)

    x = torch.tensor([0, 0.0025, 0.5, 0.8, 1], requires_grad=True)
    loss_function(x).backward()
    x.grad  # tensor([    nan,  0.1416, -0.0243, -0.0167,  0.0000])
    ```

    ## Use instead
    ```python
    gamma_x = torch.where(x < 0.003, 12.9 * x, torch.where(x < 0.003, torch.ones_like(x), x) ** 0.5)
    ```
    A float mask built from a comparison becomes that comparison again (`mask > 0` when
    the comparison's names were rebound in between); a bool mask keeps its name. The
    inner `where` feeds the unsafe function 1 (0 for `acos`, `asin`, `atanh`) exactly
    where its result is discarded.

    ## Fix safety
    Safe for bool masks: the blend and `torch.where` agree wherever the blend was
    finite (it gave `nan` where the discarded branch was infinite), with the same dtype.
    Unsafe for float masks: the values agree, but the blend's dtype was promoted with the
    mask's (a `.float()` mask over `float16` branches gave `float32`, `torch.where` keeps
    `float16`). Also unsafe when the mask expression calls something that may not give
    the same value twice. A branch that is a name bound earlier (`g = x ** 0.5`, then
    `mask * a + (1 - mask) * g`) is reported without a fix. Indexing the input first is
    safe (an elementwise op of one tensor commutes with indexing); the guard of a name's
    binding needs every read of the name indexed by the same mask, else no fix. Masking
    a loss's inputs first is unsafe: it assumes every input has the mask's shape (not
    broadcast). Dividing by 1 where a literal divisor is 0 is safe: only positions
    the index never reads change.
    """

    code = "GF301"
    name = "masked-unsafe-branch"
    synopsis = (
        "Finds mask-weighted blends whose masked-out branch is singular, giving `nan` "
        "gradients, and rewrites them to `torch.where` with a guarded input."
    )
    message = (
        "Masked-out branch is singular (`0 * inf = nan` in its gradient); "
        "use `torch.where` with a guarded input"
    )
    fix_safety = FixSafety.SAFE
    fix_availability = FixAvailability.SOMETIMES
    fix_safeties = (FixSafety.SAFE, FixSafety.UNSAFE)

    VALID = [
        Valid(
            """
            import torch
            w = torch.ones(4, requires_grad=True)
            scale = torch.tensor([2.0, 0.0, 4.0, 1.0])
            shown = w / scale
            print(shown[1])  # reads the division by zero: the forward shows inf
            whole = (w / scale).sum()
            ok = (w / torch.tensor([2.0, 3.0, 4.0, 1.0]))[0]
            i = 2
            unknown = (w / scale)[i]
            """
        ),
        Valid(
            """
            import torch

            def soft_clip(x):
                mask = (x < 0.5).float()
                return mask * x ** 2 + (1 - mask) * (x - 0.25)
            """
        ),
        Valid(
            """
            import torch

            def gamma(x):
                mask = (x < 0.003).float()
                return mask * 12.9 * x + (1 - mask) * x.clamp(min=1e-8) ** 0.5
            """
        ),
        Valid(
            """
            import torch

            def masked_nll(probs, labels):
                pad = (labels != 0).float()
                return -(pad * torch.log(probs)).sum() / pad.sum()
            """
        ),
        Valid(
            """
            import torch

            def blend(a, v, lam: float):
                return lam * a + (1 - lam) * torch.sqrt(v)
            """
        ),
        Valid(
            """
            import torch

            image = torch.rand(8)
            dark = (image < 0.003).float()
            encoded = dark * 12.9 * image + (1 - dark) * image ** 0.5
            """
        ),
        Valid(
            """
            import torch

            @torch.no_grad()
            def encode(x):
                mask = (x < 0.003).float()
                return mask * 12.9 * x + (1 - mask) * x ** 0.5
            """
        ),
        Valid(
            """
            import torch

            def masked_log(p, labels):
                # the mask is about labels: it says nothing about where `log` is singular
                return torch.log(p)[labels > 0].sum()
            """
        ),
        Valid(
            """
            import torch

            def masked_log(p):
                a = torch.log(p.clamp(min=1e-12))[p > 0]
                b = torch.log(p[p > 0])
                return a.sum() + b.sum()
            """
        ),
        Valid(
            """
            import torch
            import torch.nn.functional as F

            def padded_loss(pred, target, lengths_mask):
                return F.mse_loss(pred, target, reduction="none")[lengths_mask].mean()
            """
        ),
        Valid(
            """
            import torch
            import torch.nn.functional as F

            def nan_counts(pred, target):
                # a sum of the inputs: the `nan` target does not reach pred's derivative
                diff = pred - target
                return diff[~torch.isnan(target)]
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch as th

            def head(w):
                scale = th.tensor([0.5, 2.0, 0.0])
                rates = w / scale
                return rates[..., :2].sum() + rates[..., -2]

            head(th.rand(3, requires_grad=True)).backward()
            """,
            """
            import torch as th

            def head(w):
                scale = th.tensor([0.5, 2.0, 0.0])
                rates = w / th.where(scale != 0, scale, th.ones_like(scale))
                return rates[..., :2].sum() + rates[..., -2]

            head(th.rand(3, requires_grad=True)).backward()
            """,
        ),
        Invalid(
            """
            import torch

            def loss_function(x):
                mask = (x < 0.003).float()
                gamma_x = (
                    mask * 12.9 * x  # linear near black
                    + (1-mask) * (x ** 0.5)
                )
                return torch.mean((x - gamma_x) ** 2)


            loss_function(torch.rand(4, requires_grad=True))
            """,
            """
            import torch

            def loss_function(x):
                mask = (x < 0.003).float()
                gamma_x = (
                    torch.where(x < 0.003, 12.9 * x,  # linear near black
                        torch.where(x < 0.003, torch.ones_like(x), x) ** 0.5)
                )
                return torch.mean((x - gamma_x) ** 2)


            loss_function(torch.rand(4, requires_grad=True))
            """,
        ),
        Invalid(
            """
            import torch

            def signed_sqrt(x, eps):
                m = x.abs() < eps
                y = m * x + ~m * x.abs() ** 0.5
                return y


            signed_sqrt(torch.rand(4, requires_grad=True), 0.1)
            """,
            """
            import torch

            def signed_sqrt(x, eps):
                m = x.abs() < eps
                y = torch.where(m, x, torch.where(m, torch.ones_like(x.abs()), x.abs()) ** 0.5)
                return y


            signed_sqrt(torch.rand(4, requires_grad=True), 0.1)
            """,
        ),
        Invalid(
            """
            import torch as th

            def compress(d):
                core = (d < 0.1).float()
                y = core * 5 * d + (1 - core) * d ** 0.5
                return y


            compress(th.rand(4, requires_grad=True))
            """,
            """
            import torch as th

            def compress(d):
                core = (d < 0.1).float()
                y = th.where(d < 0.1, 5 * d, th.where(d < 0.1, th.ones_like(d), d) ** 0.5)
                return y


            compress(th.rand(4, requires_grad=True))
            """,
        ),
        Invalid(
            """
            import torch

            def xlogx(p):
                nz = p > 0
                plogp = nz * p * torch.log(p)
                return plogp.sum()


            xlogx(torch.rand(4, requires_grad=True))
            """,
            """
            import torch

            def xlogx(p):
                nz = p > 0
                plogp = torch.where(nz, p * torch.log(torch.where(nz, p, torch.ones_like(p))), 0)
                return plogp.sum()


            xlogx(torch.rand(4, requires_grad=True))
            """,
        ),
        Invalid(
            """
            import torch

            def zero_weighted(x):
                return (x - 0 * x ** 0.5).pow(2).mean()


            zero_weighted(torch.rand(4, requires_grad=True))
            """,
            report_only=True,
        ),
        Invalid(
            """
            import torch as th

            def positive_log(p):
                return th.log(p)[p > 0].sum() + p.sqrt()[p > 0].sum()


            positive_log(th.rand(4, requires_grad=True))
            """,
            """
            import torch as th

            def positive_log(p):
                return th.log(p[p > 0]).sum() + p[p > 0].sqrt().sum()


            positive_log(th.rand(4, requires_grad=True))
            """,
        ),
        Invalid(
            """
            import torch

            def ratio(num, den):
                r = num / den
                keep = den != 0
                return r[keep].sum()


            ratio(torch.rand(4, requires_grad=True), torch.rand(4))
            """,
            """
            import torch

            def ratio(num, den):
                r = num / torch.where(den != 0, den, torch.ones_like(den))
                keep = den != 0
                return r[keep].sum()


            ratio(torch.rand(4, requires_grad=True), torch.rand(4))
            """,
        ),
        Invalid(
            """
            import torch

            def ratio(num, den):
                r = num / den
                print(r)  # read unmasked: guarding `den` would change what is printed
                return r[den != 0].sum()


            ratio(torch.rand(4, requires_grad=True), torch.rand(4))
            """,
            report_only=True,
        ),
        Invalid(
            """
            import torch
            from torch import nn

            criterion = nn.MSELoss(reduction="none")

            def observed_loss(pred, target):
                observed = ~torch.isnan(target)
                return criterion(pred, target)[observed].mean()


            observed_loss(torch.rand(4, requires_grad=True), torch.rand(4))
            """,
            """
            import torch
            from torch import nn

            criterion = nn.MSELoss(reduction="none")

            def observed_loss(pred, target):
                observed = ~torch.isnan(target)
                return criterion(pred[observed], target[observed]).mean()


            observed_loss(torch.rand(4, requires_grad=True), torch.rand(4))
            """,
        ),
        Invalid(
            """
            import torch

            def squared_error(a, b):
                return (a - b) ** 2

            def loss(pred, target):
                return squared_error(pred, target)[target.isfinite()].mean()


            loss(torch.rand(4, requires_grad=True), torch.rand(4))
            """,
            """
            import torch

            def squared_error(a, b):
                return (a - b) ** 2

            def loss(pred, target):
                return squared_error(pred[target.isfinite()], target[target.isfinite()]).mean()


            loss(torch.rand(4, requires_grad=True), torch.rand(4))
            """,
        ),
    ]

    def __init__(self, context: RuleContext) -> None:
        super().__init__(context)
        self._in_blend: set[int] = set()  # products already reported as a blend's terms
        self._reported_ops: set[int] = set()  # ops reported as indexed later

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if type(node.ctx) is not ast.Load:
            return
        # most indices are constants, slices and tuples: no mask (the singular and the
        # nan checks index by one): only a division by a literal vector with a zero is left
        masked = type(node.slice) in MASK_TYPES
        if not masked and not self._builds_zero_vector:
            return
        if self.analysis.in_no_grad(node):
            return
        found = singular_before_index(node, self.analysis) if masked else None
        if found is not None:
            # a name indexed later is reported where its op is computed (and guarded)
            where = found.use.node if found.binding is not None else node
            if id(where) not in self._reported_ops:
                self._reported_ops.add(id(where))
                self.report(where, _INDEX_MESSAGE, fix=self._index_fix(node, found))
            return
        zero = None
        if self._builds_zero_vector:  # the divisor is one
            zero = zero_divisor_before_index(node, self.analysis)
        if zero is not None:
            where = zero.use.node if zero.binding is not None else node
            if id(where) not in self._reported_ops:
                self._reported_ops.add(id(where))
                self.report(where, _ZERO_MESSAGE, fix=self._zero_divisor_fix(zero))
            return
        nan = nan_data_before_index(node, self.analysis) if masked else None
        if nan is not None:
            self.report(node, _NAN_MESSAGE, fix=self._nan_fix(node, nan))

    @functools.cached_property
    def _builds_zero_vector(self) -> bool:
        return builds_zero_vector(self.analysis)

    def _index_fix(self, node: ast.Subscript, found: SingularIndex) -> FixPlan | None:
        if found.binding is not None and found.condition_at_binding is None:
            return None  # the name is read elsewhere, or the mask is not known where it is bound
        condition = mask_expression(found)
        safe = is_pure(condition, self.analysis)
        imports = () if self.analysis.torch_alias() else ("torch",)
        if found.index_first:
            build, description = (
                _index_first_builder(node, found.use.argument),
                "Index the input first",
            )
        else:
            build = _guard_builder(found, condition)
            description = f"Guard the input of {found.use.function.name} where the mask drops it"
        return self.plan(
            build, description, safety=None if safe else FixSafety.UNSAFE, imports=imports
        )

    def _zero_divisor_fix(self, zero: ZeroDivisorIndex) -> FixPlan:
        """The divisor is 1 where it is 0: those positions are never read."""
        divisor = zero.use.argument

        def build(editor: Editor) -> list[Edit]:
            argument = expression_node(editor, divisor)
            nonzero = cst.Comparison(
                strip_parens(argument),
                [cst.ComparisonTarget(cst.NotEqual(), cst.Integer("0"))],
            )
            return [Edit(argument, guard(argument, zero.use.function, nonzero, True, editor))]

        imports = () if self.analysis.torch_alias() else ("torch",)
        description = "Divide by 1 where the divisor is 0 (positions the index never reads)"
        return self.plan(build, description, imports=imports)

    def _nan_fix(self, node: ast.Subscript, nan: NanMasked) -> FixPlan | None:
        if not nan.fixable or not is_pure(node.slice, self.analysis):
            return None

        def build(editor: Editor) -> list[Edit]:
            subscript = cst.ensure_type(editor.node(node), cst.Subscript)
            call = cst.ensure_type(editor.node(nan.call), cst.Call)
            replacements: dict[cst.CSTNode, cst.CSTNode] = {}
            for tensor in nan.tensors:
                value = expression_node(editor, tensor)
                replacements[value] = _indexed(value, subscript)
            replaced = editor.replace_nodes(call, replacements)
            assert isinstance(replaced, cst.Call)
            return [
                Edit(subscript, replaced.with_changes(lpar=subscript.lpar, rpar=subscript.rpar))
            ]

        return self.plan(build, "Mask the inputs first", safety=FixSafety.UNSAFE)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        op = type(node.op)
        if op is ast.Add:
            if not self.analysis.in_no_grad(node):
                self._check_blend(node)
        elif (op is ast.Mult or op is ast.Div) and self._is_product_top(node):
            if id(node) not in self._in_blend and not self.analysis.in_no_grad(node):
                self._check_product(node)

    def _is_product_top(self, node: ast.BinOp) -> bool:
        parent = self.analysis.parent(node)
        if type(parent) is not ast.BinOp:
            return True
        if type(parent.op) is ast.Mult:
            return False
        return not (type(parent.op) is ast.Div and parent.left is node)

    # -- mask * a + (1 - mask) * b ------------------------------------------------------------
    def _check_blend(self, node: ast.BinOp) -> None:
        for kept, dropped in ((node.left, node.right), (node.right, node.left)):
            for mask_factor in factors(kept):
                mask = resolve_mask(mask_factor, node, self.analysis)
                if mask is None:
                    continue
                for complement in factors(dropped):
                    if complement_of(complement, mask_factor, node, self.analysis):
                        blend = _Weighted(node, mask, kept, mask_factor, dropped, complement)
                        if self._report(blend):
                            self._in_blend.update((id(node.left), id(node.right)))
                            return

    # -- mask * b, 0 * b --------------------------------------------------------------------
    def _check_product(self, node: ast.BinOp) -> None:
        parts = factors(node)
        if any(literal_number(f) == 0.0 for f in parts):
            constant = not self.analysis.requires_grad(node, node)
            if unsafe_uses(node, self.analysis) and not constant:
                self.report(node, "`0 * f(x)` still back-propagates `0 * inf = nan` from `f`")
            return
        for mask_factor in parts:
            mask = resolve_mask(mask_factor, node, self.analysis)
            if mask is not None:
                if self._report(_Weighted(node, mask, node, mask_factor)):
                    return

    def _report(self, blend: _Weighted) -> bool:
        """Report the blend if a branch is singular where the mask discards it."""
        node, condition = blend.node, blend.mask.condition
        branch_a = branch_without(blend.kept, blend.mask_factor)
        branch_b = None
        if blend.dropped is not None and blend.complement is not None:
            branch_b = branch_without(blend.dropped, blend.complement)
        uses_a = singular_uses(branch_a, True, condition, node, self.analysis)
        uses_b = (
            singular_uses(branch_b, False, condition, node, self.analysis)
            if branch_b is not None
            else []
        )
        if uses_a or uses_b:
            self.report(node, fix=self._fix(blend, uses_a, uses_b))
            return True
        branches = [(branch_a, True), (branch_b, False)]
        if any(
            singular_indirect(b, k, condition, node, self.analysis)
            for b, k in branches
            if b is not None
        ):
            self.report(node)
            return True
        return False

    def _fix(self, blend: _Weighted, uses_a: list[UnsafeUse], uses_b: list[UnsafeUse]) -> FixPlan:
        mask = blend.mask
        safe = mask.is_bool and is_pure(selector_expression(mask.selector), self.analysis)
        imports = () if self.analysis.torch_alias() else ("torch",)
        return self.plan(
            _where_builder(blend, uses_a, uses_b),
            "Use `torch.where` and guard the singular input with an inner `torch.where`",
            safety=None if safe else FixSafety.UNSAFE,
            imports=imports,
        )


_INDEX_MESSAGE = (
    "Indexing after a singular op keeps its `nan` gradient (`0 * inf`) at the positions "
    "indexed away; index the input first"
)
_NAN_MESSAGE = (
    "Masking a loss after computing it on `nan` data keeps the `nan` in its gradient; "
    "mask the inputs first"
)
_ZERO_MESSAGE = (
    "Division by a tensor with zeros whose result is only read at other positions: the "
    "forward is finite, but the gradient there is 0 / 0 = nan; divide by 1 where the "
    "divisor is 0, or index the operands first"
)


def _indexed(value: cst.BaseExpression, subscript: cst.Subscript) -> cst.Subscript:
    """``value[<the index of subscript>]``, ``value`` parenthesised unless it is an atom."""
    return subscript.with_changes(value=as_receiver(value), lpar=[], rpar=[])


def _index_first_builder(node: ast.Subscript, argument: ast.expr) -> Callable[[Editor], list[Edit]]:
    """`f(x)[m]` -> `f(x[m])`: the op applies to the kept inputs only."""

    def build(editor: Editor) -> list[Edit]:
        subscript = cst.ensure_type(editor.node(node), cst.Subscript)
        value = subscript.value
        old = expression_node(editor, argument)
        replaced = editor.replace_nodes(value, {old: _indexed(old, subscript)})
        assert isinstance(replaced, cst.BaseExpression)
        if subscript.lpar:
            replaced = replaced.with_changes(lpar=subscript.lpar, rpar=subscript.rpar)
        return [Edit(subscript, replaced)]

    return build


def _guard_builder(found: SingularIndex, condition: ast.expr) -> Callable[[Editor], list[Edit]]:
    """The singular input gets a harmless value where the mask drops it (in the bound value
    when the indexed value is a name): the indexed positions keep their values."""

    def build(editor: Editor) -> list[Edit]:
        argument = expression_node(editor, found.use.argument)
        selector = expression_node(editor, condition)
        return [Edit(argument, guard(argument, found.use.function, selector, True, editor))]

    return build


@dataclass(frozen=True)
class _Weighted:
    """``node`` weights ``kept`` by ``mask_factor`` (one of its factors) and, in a blend,
    ``dropped`` by ``complement`` (the mask's complement); a lone product has no
    ``dropped`` (its other branch is 0)."""

    node: ast.BinOp
    mask: Mask
    kept: ast.expr
    mask_factor: ast.expr
    dropped: ast.expr | None = None
    complement: ast.expr | None = None


def _where_builder(
    blend: _Weighted, uses_a: list[UnsafeUse], uses_b: list[UnsafeUse]
) -> Callable[[Editor], list[Edit]]:
    """The fix: `torch.where(selector, a, b)` in place of the blend, each singular input
    guarded by an inner `torch.where`."""

    def branch(editor: Editor, product: ast.expr, factor: ast.expr) -> cst.BaseExpression:
        return strip_parens(
            without_factor(expression_node(editor, product), expression_node(editor, factor))
        )

    def guarded(
        editor: Editor, branch: cst.BaseExpression, uses: list[UnsafeUse], kept_when: bool
    ) -> cst.BaseExpression:
        selector = selector_node(blend.mask.selector, editor)
        replacements: dict[cst.CSTNode, cst.CSTNode] = {}
        for use in uses:
            argument = expression_node(editor, use.argument)
            replacements[argument] = guard(argument, use.function, selector, kept_when, editor)
        replaced = editor.replace_nodes(branch, replacements)
        assert isinstance(replaced, cst.BaseExpression)
        return replaced

    def build(editor: Editor) -> list[Edit]:
        node = editor.node(blend.node)
        assert isinstance(node, cst.BinaryOperation)
        branch_a = guarded(editor, branch(editor, blend.kept, blend.mask_factor), uses_a, True)
        branch_b: cst.BaseExpression = cst.Integer("0")
        if blend.dropped is not None and blend.complement is not None:
            dropped = branch(editor, blend.dropped, blend.complement)
            branch_b = guarded(editor, dropped, uses_b, False)
        between = _comma_whitespace(node) if isinstance(node.operator, cst.Add) else None
        comma = cst.Comma(whitespace_after=between or cst.SimpleWhitespace(" "))
        selector = selector_node(blend.mask.selector, editor)
        arguments = [cst.Arg(selector), cst.Arg(branch_a, comma=comma), cst.Arg(branch_b)]
        where = editor.torch_attr("where")
        return [Edit(node, cst.Call(where, arguments, lpar=node.lpar, rpar=node.rpar))]

    return build


def _comma_whitespace(node: cst.BinaryOperation) -> cst.BaseParenthesizableWhitespace | None:
    """Keep a line break (and its comment) that stood around the `+` of a multi-line blend,
    indented one level more as a continuation line."""
    operator = node.operator
    for side in ("whitespace_before", "whitespace_after"):
        whitespace = getattr(operator, side, None)
        if isinstance(whitespace, cst.ParenthesizedWhitespace):
            deeper = cst.SimpleWhitespace(whitespace.last_line.value + "    ")
            return whitespace.with_changes(last_line=deeper)
    return None
