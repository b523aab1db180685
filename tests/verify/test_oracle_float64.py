"""Finite differences in float64: a change of a few parts in 10^3 (the second-order term
``create_graph=True`` restores) is below float32's rounding noise, so the program is run
again in double precision with the same random values to judge it."""

from __future__ import annotations

import torch

from gradfix.verify import verify_sources
from gradfix.verify.intent import FixIntent

TIMEOUT = 60.0

# MAML's inner step: torch.autograd.grad without create_graph drops the second-order term.
MAML = """\
import torch
import torch.nn.functional as F

torch.manual_seed(0)
params = [torch.randn(4, 3, requires_grad=True), torch.zeros(4, requires_grad=True)]


def net(x, params):
    return torch.tanh(F.linear(x, params[0], params[1]))


x_spt, y_spt = torch.randn(5, 3), torch.randn(5, 4)
x_qry, y_qry = torch.randn(5, 3), torch.randn(5, 4)
loss = F.mse_loss(net(x_spt, params), y_spt)
grad = torch.autograd.grad(loss, params)
fast = [p - 0.4 * g for g, p in zip(grad, params)]
F.mse_loss(net(x_qry, fast), y_qry).backward()
"""
MAML_FIX = MAML.replace(
    "torch.autograd.grad(loss, params)", "torch.autograd.grad(loss, params, create_graph=True)"
)


def test_the_second_order_term_is_proven_by_float64_differences() -> None:
    verdict = verify_sources(MAML, MAML_FIX, timeout=TIMEOUT, rules=["GF406"])
    assert verdict.status == "verified", verdict.reason
    assert "by finite differences of before run in float64" in verdict.reason
    methods = {cut["method"] for cut in verdict.evidence["silent_graph_cuts"]}
    assert "float64" in methods


def test_dropping_the_second_order_term_is_still_rejected() -> None:
    verdict = verify_sources(MAML_FIX, MAML, timeout=TIMEOUT, rules=["GF406"])
    assert verdict.status == "rejected", verdict.reason


def test_a_float64_run_draws_the_same_random_values() -> None:
    from gradfix.verify import instrument

    instrument.install()

    def build() -> list[torch.Tensor]:
        torch.manual_seed(0)
        linear, cell = torch.nn.Linear(20, 3), torch.nn.GRUCell(3, 3)
        return [linear.weight, cell.weight_hh, torch.randn(5, requires_grad=True), torch.rand(7)]

    narrow = build()
    with instrument.float64_run():
        wide = build()
    assert torch.get_default_dtype() == torch.float32
    for a, b in zip(narrow, wide):
        assert b.dtype == torch.float64
        assert torch.equal(a.double(), b)
    assert wide[2].is_leaf and wide[2].requires_grad


def test_a_float64_run_keeps_double_precision_through_explicit_float32() -> None:
    """A program that asks for float32 itself (``.float()``, ``dtype=torch.float32``,
    ``.to(torch.float32)``) stays in float64, with the values float32 would have given:
    a float32 input would otherwise meet float64 weights (a dtype error) or round again."""
    from gradfix.verify import instrument

    instrument.install()

    def build() -> list[torch.Tensor]:
        torch.manual_seed(0)
        conv = torch.nn.Conv2d(2, 2, 3).float()
        x = torch.ones(1, 2, 3, 3).float()
        w = torch.randn(3, requires_grad=True, dtype=torch.float32)
        c = torch.tensor([0.1, 0.2], dtype=torch.float32)
        return [conv(x), w, c, torch.arange(3).float(), torch.zeros(2).to(torch.float32)]

    narrow = build()
    with instrument.float64_run():
        wide = build()
    for a, b in zip(narrow, wide):
        assert b.dtype == torch.float64
        assert torch.allclose(a.double(), b, atol=1e-6)
    assert torch.equal(narrow[2].double(), wide[2])  # made in float32, then widened
    assert wide[1].is_leaf and wide[1].requires_grad
    assert torch.zeros(2).to(torch.float16).dtype == torch.float16


# An in-place write hidden from autograd by ``.data`` in a model whose input is converted
# with ``.float()``: only the float64 run resolves that the gradient is wrong.
SELFREF = """\
import torch


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(4, 4, 3)

    def forward(self, x, y):
        x = self.conv(x)
        var = self.conv(y).flatten()
        x[0, :, 0, 0] = x[0, :, 0, 0] * var
        return torch.mean(x)


torch.manual_seed(0)
model = Model()
x = torch.ones([1, 4, 3, 3]).float()
loss = model(x, torch.ones([1, 4, 3, 3]).float())
loss.backward()
"""


def test_a_write_hidden_by_data_is_rejected_in_a_program_that_calls_float() -> None:
    wrong = SELFREF.replace("x[0, :, 0, 0] = x[0", "x.data[0, :, 0, 0] = x[0")
    verdict = verify_sources(SELFREF, wrong, timeout=TIMEOUT, rules=["GF202"])
    assert verdict.status == "rejected", verdict.reason
    assert "in float64" in verdict.reason
    right = SELFREF.replace("x[0, :, 0, 0] * var", "x[0, :, 0, 0].clone() * var")
    assert verify_sources(SELFREF, right, timeout=TIMEOUT, rules=["GF202"]).status == "verified"


def test_two_gradients_between_a_kink_s_slopes_are_not_told_apart() -> None:
    """At a kink (``relu`` and ``clamp`` at exactly 0 take different subgradients) both
    gradients lie between the one-sided slopes of finite differences: nothing rejects
    either."""
    before = """import torch

w = torch.tensor([1.0, 2.0], requires_grad=True)
torch.relu(w - 1.0).sum().backward()
"""
    after = before.replace("torch.relu(w - 1.0)", "torch.clamp(w - 1.0, min=0.0)")
    verdict = verify_sources(before, after, timeout=TIMEOUT, rules=["GF301"])
    assert verdict.status == "unverified", verdict.reason
    assert "no derivative there" in verdict.reason


# Domain codes made with the legacy float32 constructor: binary_cross_entropy_with_logits
# computes in its target's dtype, so in the float64 run the adversarial term would still
# be rounded in float32, and its finite differences would not see the term at all.
ITEM_TERM = """\
import numpy as np
import torch
import torch.nn as nn

torch.manual_seed(0)
net = nn.Linear(3, 2)
codes = torch.FloatTensor(np.ones((4, 2)))
x = torch.randn(4, 3)
out = net(x)
adv = nn.BCEWithLogitsLoss()(out, codes)
adv = adv.detach().item()
loss = out.pow(2).mean() + 0.02 * adv
loss.backward()
"""


def test_the_float64_run_widens_tensors_the_program_made_in_float32() -> None:
    # the term .item() cut off weighs little: float32's differences accept both
    # gradients, and only the float64 run tells the repaired one from the cut one
    fixed = ITEM_TERM.replace("adv = adv.detach().item()\n", "")
    verdict = verify_sources(ITEM_TERM, fixed, timeout=60.0, intent=FixIntent.unknown())
    assert verdict.status == "verified", verdict.reason
    assert "a silent graph cut" in verdict.reason
