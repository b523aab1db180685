"""GF301 masked-unsafe-branch and GF302 where-unsafe-branch: cases beyond the embedded
examples and fixtures."""

from __future__ import annotations

import textwrap

from gradfix.codemods.masked_unsafe_branch import MaskedUnsafeBranch
from gradfix.codemods.where_unsafe_branch import WhereUnsafeBranch
from gradfix.engine import lint_source


def run(code: str, rule: type) -> tuple[list[str], str]:
    source = textwrap.dedent(code).lstrip("\n")
    result = lint_source(source, rules=[rule], fix=True, unsafe_fixes=True)
    assert not result.crashes
    return [f.code for f in result.findings], result.source


def test_parenthesized_mask_name_is_the_mask() -> None:
    # The LibCST version analysed a copy of `(m)` without its parentheses; the copy was
    # outside the tree, so `m` was looked up at module level and the blend was missed.
    codes, fixed = run(
        """
        import torch

        def signed_sqrt(x, eps):
            m = x.abs() < eps
            return (m) * x + (~m) * x.abs() ** 0.5


        signed_sqrt(torch.rand(4, requires_grad=True), 0.1)
        """,
        MaskedUnsafeBranch,
    )
    assert codes == ["GF301"]
    assert (
        "return torch.where((m), x, torch.where(m, torch.ones_like(x.abs()), x.abs()) ** 0.5)"
        in fixed
    )


def test_parenthesized_branch_name_is_followed_to_its_binding() -> None:
    # Same copy: `(s)` was looked up at module level, and `s = torch.sqrt(d)` was missed.
    codes, fixed = run(
        """
        import torch

        def root(d):
            s = torch.sqrt(d)
            return torch.where(d > 0, (s), 0)


        root(torch.rand(4, requires_grad=True))
        """,
        WhereUnsafeBranch,
    )
    assert codes == ["GF302"]
    assert "torch.where(d > 0, (s), 0)" in fixed  # reported without a fix


def test_module_level_name_of_the_same_spelling_is_not_the_local_mask() -> None:
    codes, _ = run(
        """
        import torch

        m = torch.rand(4) > 2

        def signed_sqrt(x, eps):
            return (m) * x + (~m) * x.abs() ** 0.5


        signed_sqrt(torch.rand(4, requires_grad=True), 0.1)
        """,
        MaskedUnsafeBranch,
    )
    assert codes == []  # `m` tests something else than `x`


def test_float_mask_whose_comparison_was_rebound_selects_with_its_values() -> None:
    codes, fixed = run(
        """
        import torch

        def blend(x, t):
            m = (x < t).float()
            t = t * 2
            return m * x + (1 - m) * x ** 0.5


        blend(torch.rand(4, requires_grad=True), 0.5)
        """,
        MaskedUnsafeBranch,
    )
    assert codes == ["GF301"]
    assert "return torch.where(m > 0, x, torch.where(m > 0, torch.ones_like(x), x) ** 0.5)" in fixed


def test_complement_mask_name_selects_with_the_negated_comparison() -> None:
    codes, fixed = run(
        """
        import torch

        def blend(x):
            m = (x < 0.5).float()
            n = 1 - m
            return n * torch.sqrt(x) + (1 - n) * x


        blend(torch.rand(4, requires_grad=True))
        """,
        MaskedUnsafeBranch,
    )
    assert codes == ["GF301"]
    guarded = "torch.sqrt(torch.where(~(x < 0.5), x, torch.ones_like(x)))"
    assert f"return torch.where(~(x < 0.5), {guarded}, x)" in fixed


def test_index_after_op_read_once_more_unmasked_has_no_fix_and_masked_twice_has_one() -> None:
    # The guard at the binding changes `r` where the mask drops it: only when every read
    # of `r` is indexed by that same mask are the values read unchanged.
    codes, fixed = run(
        """
        import torch

        def ratio(num, den):
            r = num / den
            return r[den != 0].sum() + r[den != 0].mean()


        ratio(torch.rand(4, requires_grad=True), torch.rand(4))
        """,
        MaskedUnsafeBranch,
    )
    assert codes == ["GF301"]
    assert "r = num / torch.where(den != 0, den, torch.ones_like(den))" in fixed
    codes, fixed = run(
        """
        import torch

        def ratio(num, den):
            r = num / den
            return r[den != 0].sum() + r[den > 0].mean()


        ratio(torch.rand(4, requires_grad=True), torch.rand(4))
        """,
        MaskedUnsafeBranch,
    )
    assert codes == ["GF301"]
    assert "r = num / den" in fixed


def test_index_after_op_with_a_mask_rebound_after_the_op_is_not_guarded() -> None:
    # `den` is rebound between the op and the mask: the mask does not test the op's input.
    codes, _ = run(
        """
        import torch

        def ratio(num, den):
            r = num / den
            den = den + 1
            return r[den != 0].sum()


        ratio(torch.rand(4, requires_grad=True), torch.rand(4))
        """,
        MaskedUnsafeBranch,
    )
    assert codes == []


def test_nan_mask_of_a_helper_that_only_adds_is_not_reported() -> None:
    # `a - b` has derivative 1 for `a`: a nan in `b` does not reach it.
    codes, _ = run(
        """
        import torch

        def residual(a, b):
            return a - b

        def loss(pred, target):
            return residual(pred, target)[~torch.isnan(target)].mean()


        loss(torch.rand(4, requires_grad=True), torch.rand(4))
        """,
        MaskedUnsafeBranch,
    )
    assert codes == []


def test_exp_overflow_needs_the_discarded_side_to_reach_the_overflow() -> None:
    # exp is only singular (overflowing) for large inputs: discarding the negative side is fine.
    codes, _ = run(
        """
        import torch

        def capped(x):
            return torch.where(x > 0, torch.exp(x), 1.0)


        capped(torch.rand(4, requires_grad=True))
        """,
        WhereUnsafeBranch,
    )
    assert codes == []


def test_nan_mask_of_a_loss_module_attribute_masks_the_inputs() -> None:
    codes, fixed = run(
        """
        import torch
        import torch.nn as nn

        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(3, 2)
                self.criterion = nn.SmoothL1Loss(reduction="none")
                self.l1 = nn.L1Loss(reduction="none")

            def loss(self, x, y):
                valid = ~torch.isnan(y)
                # l1: the sign of a nan difference back-propagates 0, nothing to report
                return self.criterion(self.fc(x), y)[valid].mean() + self.l1(self.fc(x), y)[valid]
        """,
        MaskedUnsafeBranch,
    )
    assert codes == ["GF301"]
    assert (
        "self.criterion(self.fc(x)[valid], y[valid]).mean() + self.l1(self.fc(x), y)[valid]"
        in fixed
    )


def test_nan_mask_of_an_abs_helper_is_not_reported() -> None:
    codes, _ = run(
        """
        import torch

        def absolute_error(a, b):
            return torch.abs(a - b)

        def loss(pred, target):
            return absolute_error(pred, target)[target.isfinite()].mean()


        loss(torch.rand(4, requires_grad=True), torch.rand(4))
        """,
        MaskedUnsafeBranch,
    )
    assert codes == []


def test_division_by_a_literal_with_zeros_read_only_elsewhere_is_guarded() -> None:
    codes, fixed = run(
        """
        import torch
        w = torch.ones(4, requires_grad=True)
        d = torch.tensor([1.0, 0.0, 2.0, 0.0])
        r = w / d
        out = r[0] + r[2:3].sum() + r[-2]
        """,
        MaskedUnsafeBranch,
    )
    assert codes == ["GF301"]
    assert "r = w / torch.where(d != 0, d, torch.ones_like(d))" in fixed
    for read in ("r[1]", "r[1:]", "r[1::2]", "r"):
        codes, _ = run(
            f"""
            import torch
            w = torch.ones(4, requires_grad=True)
            r = w / torch.tensor([1.0, 0.0, 2.0, 0.0])
            out = r[0] + {read}.sum()
            """,
            MaskedUnsafeBranch,
        )
        assert codes == [], read
