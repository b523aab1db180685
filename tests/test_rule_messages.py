"""Rule messages say what really happens (issue 32): what a layer built in `forward`
holds, one finding per missing gradient reset."""

from __future__ import annotations

import textwrap

from gradfix.codemods.layer_created_in_forward import LayerCreatedInForward
from gradfix.codemods.missing_zero_grad import MissingZeroGrad
from gradfix.engine import lint_source

NORM_IN_FORWARD = """
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        x = nn.LayerNorm(4)(self.fc(x))
        x = nn.PReLU()(x)
        return nn.Linear(4, 2)(x)
"""


def test_a_norm_layer_built_in_forward_is_not_said_to_get_random_weights() -> None:
    findings = lint_source(textwrap.dedent(NORM_IN_FORWARD), rules=[LayerCreatedInForward])
    messages = {f.line: f.message for f in findings.findings}
    assert messages[12] == (
        "Layer with parameters built inside `forward`: every call makes a new one whose "
        "parameters start again at their initial values (weight 1, bias 0) and are never "
        "trained; build it once in `__init__`"
    )
    assert "(weight `init`, 0.25 by default)" in messages[13]
    assert "new random weights" in messages[14]  # nn.Linear's are random


TWO_BACKWARD_CALLS = """
import torch

model = torch.nn.Linear(3, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x in torch.randn(5, 3):
    model(x).sum().backward()
    (model(x) ** 2).sum().backward()
    opt.step()
    for y in torch.randn(2, 3):
        model(y).sum().backward()
        opt.step()
"""


def test_one_missing_zero_grad_is_reported_once_per_loop() -> None:
    """Not once per backward call of the loop; the inner loop misses its own reset."""
    findings = lint_source(textwrap.dedent(TWO_BACKWARD_CALLS), rules=[MissingZeroGrad])
    assert [(f.line, f.code) for f in findings.findings] == [(7, "GF405"), (11, "GF405")]
