"""GF406 on shapes its examples cannot hold (another rule reports them too)."""

from __future__ import annotations

import textwrap

from gradfix.codemods.inner_grad_without_create_graph import InnerGradWithoutCreateGraph
from gradfix.engine import lint_source


def _lines(source: str) -> list[int]:
    result = lint_source(textwrap.dedent(source), rules=[InnerGradWithoutCreateGraph])
    return [finding.line for finding in result.findings]


def test_an_adversarial_step_through_sign_is_not_an_inner_step() -> None:
    # FGSM: the input gradient's sign has no gradient of its own; nothing is lost
    found = _lines(
        """
        import torch
        import torch.nn.functional as F

        model = torch.nn.Linear(3, 2)
        x = torch.randn(4, 3, requires_grad=True)
        (g,) = torch.autograd.grad(F.cross_entropy(model(x), torch.zeros(4).long()), x)
        x_adv = x + 0.03 * g.sign()
        F.cross_entropy(model(x_adv), torch.zeros(4).long()).backward()
        """
    )
    assert found == []


def test_new_weights_returned_by_a_helper_and_backpropagated_by_its_caller() -> None:
    found = _lines(
        """
        import torch

        w = torch.randn(3, requires_grad=True)

        def adapt(x):
            (g,) = torch.autograd.grad((x @ w).pow(2).sum(), [w])
            return w - 0.5 * g

        fast = adapt(torch.randn(2, 3))
        (torch.randn(2, 3) @ fast).sum().backward()
        """
    )
    assert found == [7]


def test_new_weights_that_are_never_backpropagated_are_not_reported() -> None:
    found = _lines(
        """
        import torch

        w = torch.randn(3, requires_grad=True)
        (g,) = torch.autograd.grad((w * w).sum(), [w])
        w_next = w - 0.5 * g
        print(w_next)
        """
    )
    assert found == []
