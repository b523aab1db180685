"""Leaves line up by the name the model binds them to: a parameter replaced after the
optimizer was built (``self.scale = nn.Parameter(...)`` in an init method) leaves the
first one unnamed and the model reading the new one; the fix that fills the first one in
place is compared with the one the model reads, not the one made at the same line."""

from __future__ import annotations

from gradfix.verify import verify_sources
from gradfix.verify.intent import FixIntent

REPLACED = """\
import torch
import torch.nn as nn

torch.manual_seed(0)


class Gain(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(1))

    def calibrate(self, value):
        self.scale = nn.Parameter(torch.tensor([value]))

    def forward(self, x):
        return x * self.scale


model = nn.Sequential(nn.Linear(4, 3), Gain())
opt = torch.optim.SGD(model.parameters(), lr=0.1)
model[1].calibrate(2.0)
x, y = torch.randn(8, 4), torch.randn(8, 3)
for _ in range(3):
    opt.zero_grad()
    loss = (model(x) - y).pow(2).mean()
    loss.backward()
    opt.step()
print(round(loss.item(), 4), round(model[1].scale.item(), 4))
"""
FILLED = REPLACED.replace(
    "        self.scale = nn.Parameter(torch.tensor([value]))\n",
    "        with torch.no_grad():\n            self.scale.fill_(value)\n",
)


def test_a_parameter_filled_in_place_instead_of_replaced_is_compared_by_name() -> None:
    verdict = verify_sources(REPLACED, FILLED, timeout=60.0, intent=FixIntent.unknown())
    assert verdict.status == "verified", verdict.reason
    assert verdict.reason.startswith("leaves now trained: #2 'model.1.scale'")
    assert "#2 'model.1.scale'" in verdict.reason.split("leaves compared:")[1]


# a head built in every forward: before makes new leaves at each step, the model's name
# binding the latest; the fix builds it once. Names line up nothing here (the leaves were
# made while training): not a reason to reject.
REBUILT = """\
import torch
import torch.nn as nn

torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(4, 3)

    def forward(self, x):
        self.head = nn.Linear(3, 2)
        return self.head(torch.relu(self.body(x)))


model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(8, 4), torch.randn(8, 2)
for _ in range(3):
    opt.zero_grad()
    loss = (model(x) - y).pow(2).mean()
    loss.backward()
    opt.step()
print(round(loss.item(), 4))
"""
BUILT_ONCE = REBUILT.replace(
    "        self.body = nn.Linear(4, 3)\n",
    "        self.body = nn.Linear(4, 3)\n        self.head = nn.Linear(3, 2)\n",
).replace("        self.head = nn.Linear(3, 2)\n        return", "        return")


def test_leaves_made_while_training_are_not_lined_up_by_name() -> None:
    verdict = verify_sources(REBUILT, BUILT_ONCE, timeout=60.0, intent=FixIntent.unknown())
    assert verdict.status != "rejected", verdict.reason
