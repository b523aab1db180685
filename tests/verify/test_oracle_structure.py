"""Runs whose leaves or calls do not line up (a change made by hand may restructure):
the gradients are then undecided, but a value the change altered is still evidence."""

from __future__ import annotations

from gradfix.verify import verify_sources
from gradfix.verify.intent import FixIntent

TIMEOUT = 60.0

# Folding a scale and a shift into a new layer's parameters, written in place on leaves
# that require grad: raises while autograd records; the program never calls backward.
FOLD = """\
import torch
import torch.nn as nn

torch.manual_seed(0)
lin = nn.Linear(4, 3)
scale, shift = torch.rand(3) + 0.5, torch.randn(3)
fused = nn.Linear(4, 3, bias=True)
fused.weight[:, :] = lin.weight * scale[:, None]
fused.bias[:] = lin.bias * scale + shift
x = torch.randn(2, 4)
out = fused(x)
print(out)
"""
WRITES = (
    "fused.weight[:, :] = lin.weight * scale[:, None]\nfused.bias[:] = lin.bias * scale + shift"
)


def test_a_change_that_drops_a_folded_term_is_rejected_though_leaves_differ() -> None:
    # (the comment moves every leaf a line down: the leaves cannot be matched one by one)
    wrong = "# folded without the shift\n" + FOLD.replace("bias=True", "bias=False").replace(
        WRITES,
        "with torch.no_grad():\n    fused.weight[:, :] = lin.weight * scale[:, None]",
    )
    verdict = verify_sources(FOLD, wrong, timeout=TIMEOUT, intent=FixIntent.unknown())
    assert verdict.status == "rejected", verdict.reason
    assert "module-level 'out'" in verdict.reason
    right = FOLD.replace(
        WRITES,
        "with torch.no_grad():\n    fused.weight[:, :] = lin.weight * scale[:, None]\n"
        "    fused.bias[:] = lin.bias * scale + shift",
    )
    verdict = verify_sources(FOLD, right, timeout=TIMEOUT, intent=FixIntent.unknown())
    assert verdict.status == "verified", verdict.reason


FROZEN = """\
import torch

torch.manual_seed(0)
model = torch.nn.Linear(3, 1)
for param in model.parameters():
    param.requires_grad = False
out = model(torch.randn(4, 3)).sum()
out.backward()
print(model.weight.grad)
"""


def test_an_output_made_to_require_grad_is_no_parameter_the_change_registers() -> None:
    """A tensor the change makes require grad (``out.requires_grad_()``, cut off from the
    model) is no parameter it registers, even where the change moves every line down."""
    wrong = "# make backward run\n" + FROZEN.replace(
        "out.backward()", "out.requires_grad_()\nout.backward()"
    )
    verdict = verify_sources(FROZEN, wrong, timeout=TIMEOUT, intent=FixIntent.unknown())
    assert verdict.status == "rejected", verdict.reason
    fixed = FROZEN.replace("param.requires_grad = False", "param.requires_grad = True")
    verdict = verify_sources(FROZEN, fixed, timeout=TIMEOUT, intent=FixIntent.unknown())
    assert verdict.status == "verified", verdict.reason
