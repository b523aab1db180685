"""GF102 leaf-rebinding: cases beyond the embedded examples and fixtures."""

from __future__ import annotations

import textwrap

import pytest

from gradfix.codemods import ALL_RULES
from gradfix.codemods.leaf_rebinding import LeafRebinding
from gradfix.engine import LintResult, lint_source


def run(code: str) -> LintResult:
    return lint_source(textwrap.dedent(code).lstrip("\n"), rules=[LeafRebinding], fix=True)


def assert_report_only(result: LintResult, reason: str) -> None:
    assert [f.code for f in result.findings] == ["GF102"]
    assert result.findings[0].fix is None
    assert reason in result.findings[0].message
    assert not result.changed


def test_reads_that_mean_the_leaf_keep_its_name() -> None:
    result = run(
        """
        import torch
        w = torch.randn(3, requires_grad=True)
        w = w.view(3, 1)
        opt = torch.optim.Adam([{"params": [w], "lr": 0.1}])
        x = torch.randn(5, 3)
        for _ in range(2):
            (x @ w).sum().backward()
            with torch.no_grad():
                w -= 0.1 * w.grad
                w.grad.zero_()
        print(w.grad, w.shape)
        """
    )
    assert result.findings[0].fix is not None
    assert "w_view = w.view(3, 1)\n" in result.source
    assert '[{"params": [w], "lr": 0.1}]' in result.source
    assert "(x @ w_view).sum()" in result.source
    assert "w -= 0.1 * w.grad\n        w.grad.zero_()" in result.source
    assert "print(w.grad, w_view.shape)" in result.source


def test_new_name_is_unique_in_the_file() -> None:
    result = run(
        """
        import torch
        eta_scaled = 1.0
        eta = torch.tensor(0.5, requires_grad=True)
        eta = eta * 2
        print(eta, eta_scaled)
        eta.backward()
        print(eta.grad)
        """
    )
    assert "eta_scaled2 = eta * 2\nprint(eta_scaled2, eta_scaled)" in result.source


def test_rebinding_in_a_loop_reads_its_previous_value() -> None:
    result = run(
        """
        import torch
        w = torch.randn(3, requires_grad=True)
        for _ in range(3):
            loss = w.sum()
            w = w.t()
        """
    )
    assert_report_only(result, "repeats in a loop")


def test_leaf_made_inside_the_loop_is_fixed() -> None:
    result = run(
        """
        import torch
        for _ in range(3):
            w = torch.randn(3, requires_grad=True)
            w = w * 2
            w.sum().backward()
            print(w.grad)
        """
    )
    assert "w_scaled = w * 2\n    w_scaled.sum().backward()\n    print(w.grad)" in result.source


def test_derived_copy_read_in_a_later_loop_would_go_stale() -> None:
    result = run(
        """
        import torch
        w = torch.randn(3, requires_grad=True)
        w = w * 0.01
        opt = torch.optim.SGD([w], lr=0.1)
        for _ in range(3):
            opt.zero_grad()
            w.pow(2).sum().backward()
            opt.step()
        """
    )
    assert_report_only(result, "stale")


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        (
            """
            import torch

            def make():
                w = torch.randn(3, requires_grad=True)
                w = w * 2
                return w
            """,
            "returned",
        ),
        (
            """
            import torch
            from torch import nn

            class Net(nn.Module):
                def __init__(self):
                    super().__init__()
                    w = nn.Parameter(torch.randn(12, 1))
                    w = w.view(3, 4)
                    self.w = w
            """,
            "stored",
        ),
        (
            """
            import torch
            w = torch.randn(3, requires_grad=True)
            w = w.t()

            def loss_fn(x):
                return (w * x).sum()

            loss_fn(torch.ones(3)).backward()
            print(w.grad)
            """,
            "nested function",
        ),
        (
            """
            import torch
            w = torch.randn(3, requires_grad=True)
            w = w.t()
            score = lambda x: (w * x).sum()
            score(torch.ones(3)).backward()
            print(w.grad)
            """,
            "nested function",
        ),
        (
            """
            import torch
            w = torch.randn(3, requires_grad=True)
            w = w * 2
            w.sum().backward()
            print(w.grad)

            def reset():
                global w
                w = torch.randn(3, requires_grad=True)
            """,
            "global",
        ),
        (
            """
            import torch
            w = torch.randn(3, requires_grad=True)
            flip = True
            if flip:
                w = w.flip(0)
            w.sum().backward()
            print(w.grad)
            """,
            "outside the block",
        ),
        (
            """
            import torch
            w = torch.randn(3, requires_grad=True)
            w.sum().backward()
            with torch.no_grad():
                w = w - 0.1 * w.grad
            """,
            "update it in place",
        ),
    ],
)
def test_escaping_names_are_reported_without_fix(code: str, reason: str) -> None:
    assert_report_only(run(code), reason)


@pytest.mark.parametrize(
    "code",
    [
        # PGD-style refinement: gradients through autograd.grad, the leaf re-made each step
        """
        import torch
        x = torch.rand(4)
        for _ in range(3):
            x = x.detach().requires_grad_(True)
            loss = (x ** 2).sum()
            (g,) = torch.autograd.grad(loss, [x])
            x = x - 0.1 * g.sign()
        """,
        # diffusers attend-and-excite: re-leafed latents refined and returned as data
        """
        import torch

        def refine(latents, steps):
            for _ in range(steps):
                latents = latents.clone().detach().requires_grad_(True)
                loss = (latents ** 2).sum()
                (grad,) = torch.autograd.grad(loss, [latents])
                latents = latents - 0.1 * grad
            return latents
        """,
        # an optimizer built before the rebinding still holds the leaf
        """
        import torch
        w = torch.randn(3, requires_grad=True)
        opt = torch.optim.SGD([w], lr=0.1)
        w = w * 2
        w.sum().backward()
        opt.step()
        """,
    ],
)
def test_rebinding_nothing_reads_as_the_leaf_is_not_reported(code: str) -> None:
    assert run(code).findings == []


def test_no_other_rule_reports_the_same_site() -> None:
    source = textwrap.dedent(
        """
        import torch
        eta = torch.nn.Parameter(torch.rand(10))
        eta = eta * 2
        eta.sum().backward()
        print(eta.grad)
        """
    )
    result = lint_source(source, rules=ALL_RULES, fix=True)
    assert [f.code for f in result.findings] == ["GF102"]
    assert "eta_scaled.sum().backward()\nprint(eta.grad)" in result.source


def test_optimizer_arguments_unpacked_in_the_call_mean_the_leaf() -> None:
    # ``SGD(*[[w]])`` passes the leaf; ``[*[w]]`` is not an element of the params list.
    passed = run(
        """
        import torch
        w = torch.randn(3, requires_grad=True)
        w = w.t()
        opt = torch.optim.SGD(*[[w]], lr=0.1)
        loss = (w * 2).sum()
        """
    )
    assert "opt = torch.optim.SGD(*[[w]], lr=0.1)\nloss = (w_t * 2).sum()\n" in passed.source
    spliced = run(
        """
        import torch
        w = torch.randn(3, requires_grad=True)
        w = w.t()
        opt = torch.optim.SGD([*[w]], lr=0.1)
        """
    )
    assert spliced.findings == []
