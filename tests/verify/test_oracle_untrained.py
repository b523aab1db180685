"""A leaf the change makes that gets a gradient no one reads, while an optimizer step after
it reads the other leaves' gradients: a parameter no optimizer trains."""

from __future__ import annotations

from gradfix.verify import verify_sources
from gradfix.verify.intent import FixIntent

TIMEOUT = 60.0

# The head is made anew at every forward call: the optimizer has the first one only.
HEAD_IN_FORWARD = """\
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(4, 8)

    def forward(self, x):
        self.head = nn.Linear(8, 2)
        return self.head(torch.relu(self.body(x)))


torch.manual_seed(0)
net = Net()
net(torch.zeros(1, 4))
opt = torch.optim.SGD(net.parameters(), lr=0.1)
x, y = torch.randn(16, 4), torch.randint(0, 2, (16,))
for step in range(3):
    opt.zero_grad()
    nn.functional.cross_entropy(net(x), y).backward()
    opt.step()
"""


def test_a_layer_the_change_keeps_in_a_plain_list_is_rejected() -> None:
    wrong = HEAD_IN_FORWARD.replace(
        "        self.body = nn.Linear(4, 8)\n",
        "        self.body = nn.Linear(4, 8)\n        self.heads = [nn.Linear(8, 2)]\n",
    ).replace(
        "        self.head = nn.Linear(8, 2)\n        return self.head(",
        "        return self.heads[0](",
    )
    verdict = verify_sources(HEAD_IN_FORWARD, wrong, timeout=TIMEOUT, intent=FixIntent.unknown())
    assert verdict.status == "rejected", verdict.reason
    assert "a parameter no optimizer trains" in verdict.reason


def test_a_new_leaf_whose_gradient_the_program_reads_is_no_untrained_parameter() -> None:
    before = """\
import torch
import torch.nn as nn

torch.manual_seed(0)
net = nn.Linear(4, 2)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
x = torch.randn(8, 4)
for step in range(2):
    opt.zero_grad()
    net(x).pow(2).sum().backward()
    opt.step()
"""
    # the change asks for the input's gradient (a saliency map) and reads it
    after = before.replace(
        "x = torch.randn(8, 4)\n", "x = torch.randn(8, 4).requires_grad_()\n"
    ).replace("    opt.step()\n", "    opt.step()\n    print(x.grad.abs().sum())\n")
    verdict = verify_sources(before, after, timeout=TIMEOUT, intent=FixIntent.unknown())
    assert "no optimizer trains" not in verdict.reason


# Layers kept in a plain list: the optimizer built from parameters() never has them.
PLAIN_LIST = """\
import torch
import torch.nn as nn


class Merge(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = []
        for _ in range(2):
            self.layers.append(nn.Linear(4, 4))

    def forward(self, x):
        for layer in self.layers:
            x = torch.tanh(layer(x))
        return x


torch.manual_seed(0)
model = nn.Sequential(Merge(), nn.Linear(4, 1))
x, y = torch.randn(8, 4), torch.randn(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    opt.zero_grad()
    ((model(x) - y) ** 2).mean().backward()
    opt.step()
"""


def test_weights_given_to_the_optimizer_without_their_biases_are_rejected() -> None:
    fixed = PLAIN_LIST.replace("self.layers = []", "self.layers = nn.ModuleList()")
    verdict = verify_sources(PLAIN_LIST, fixed, timeout=TIMEOUT, intent=FixIntent.unknown())
    assert verdict.status == "verified", verdict.reason
    wrong = PLAIN_LIST.replace(
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)",
        "weights = [layer.weight for layer in model[0].layers]\n"
        "opt = torch.optim.SGD([*model.parameters(), *weights], lr=0.1)",
    )
    verdict = verify_sources(PLAIN_LIST, wrong, timeout=TIMEOUT, intent=FixIntent.unknown())
    assert verdict.status == "rejected", verdict.reason
    assert "made by the same statement" in verdict.reason


# A learnable slope kept as a plain tensor attribute: never registered, never trained.
SLOPE = """\
import torch
import torch.nn as nn


class Dice(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.alpha = torch.zeros(n)

    def forward(self, x):
        p = torch.sigmoid(x)
        return self.alpha * (1 - p) * x + p * x


torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 6), Dice(6), nn.Linear(6, 1))
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
x, y = torch.randn(16, 4), torch.randn(16, 1)
for step in range(3):
    opt.zero_grad()
    ((model(x) - y) ** 2).mean().backward()
    opt.step()
"""


def test_a_parameter_registered_below_inserted_lines_is_matched_by_its_statement() -> None:
    # the comment moves every later leaf a line down
    fixed = SLOPE.replace(
        "        self.alpha = torch.zeros(n)\n",
        "        # a parameter, so that the optimizer trains it\n"
        "        self.alpha = nn.Parameter(torch.zeros(n))\n",
    )
    verdict = verify_sources(SLOPE, fixed, timeout=TIMEOUT, intent=FixIntent.unknown())
    assert verdict.status == "verified", verdict.reason
    assert "leaves now trained" in verdict.reason
    wrong = SLOPE.replace("torch.zeros(n)", "torch.zeros(n, requires_grad=True)")
    verdict = verify_sources(SLOPE, wrong, timeout=TIMEOUT, intent=FixIntent.unknown())
    assert verdict.status == "rejected", verdict.reason
    assert "a parameter no optimizer trains" in verdict.reason


# The stem is frozen by a hard-coded rule; the optimizer is built from what trains.
STEM_FROZEN = """\
import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 1))
model[0].requires_grad_(False)
opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
x, y = torch.randn(8, 4), torch.randn(8, 1)
for step in range(2):
    opt.zero_grad()
    ((model(x) - y) ** 2).mean().backward()
    opt.step()
"""


def test_a_parameter_unfrozen_after_the_optimizer_was_built_is_still_untrained() -> None:
    late = STEM_FROZEN.replace(
        "x, y = torch.randn(8, 4), torch.randn(8, 1)\n",
        "x, y = torch.randn(8, 4), torch.randn(8, 1)\nmodel[0].requires_grad_(True)\n",
    )
    verdict = verify_sources(STEM_FROZEN, late, intent=FixIntent.unknown())
    assert verdict.status == "rejected", verdict.reason
    assert "gives leaf 0 'model.0.weight' (nn.Parameter at line 5) a gradient" in verdict.reason
    assert "no optimizer step reads it" in verdict.reason
    # unfrozen before the optimizer is built: it trains
    early = STEM_FROZEN.replace("model[0].requires_grad_(False)\n", "")
    verdict = verify_sources(STEM_FROZEN, early, intent=FixIntent.unknown())
    assert verdict.status == "verified", verdict.reason
    assert verdict.reason.startswith("leaves now trained: #0 'model.0.weight'")


# A frozen denoiser under no_grad: the input's perturbation gets no gradient through it.
DENOISED = """\
import torch
import torch.nn as nn

torch.manual_seed(0)
denoiser, classifier = nn.Linear(4, 4), nn.Linear(4, 2)
delta = torch.zeros(3, 4, requires_grad=True)
opt = torch.optim.SGD([delta], lr=0.1)
x = torch.randn(3, 4)
for step in range(2):
    opt.zero_grad()
    with torch.no_grad():
        clean = denoiser(x + delta)
    classifier(clean).sum().backward()
    opt.step()
"""


def test_a_gradient_that_now_reaches_parameters_meant_to_require_it_is_no_unfreezing() -> None:
    """The denoiser's weights required grad all along: a change that removes the
    ``no_grad`` block lets gradients reach them (unread), which unfreezes nothing."""
    fixed = DENOISED.replace(
        "    with torch.no_grad():\n        clean = denoiser(x + delta)\n",
        "    clean = denoiser(x + delta)\n",
    )
    verdict = verify_sources(DENOISED, fixed, intent=FixIntent.unknown())
    assert verdict.status != "rejected", verdict.reason
