"""A change that regroups the backward calls: what each leaf's gradient accumulates
between its resets (what a step reads) must still match."""

from __future__ import annotations

from gradfix.verify import verify_sources
from gradfix.verify.intent import FixIntent

TIMEOUT = 60.0

TWO_LOSSES = """\
import torch
import torch.nn as nn

torch.manual_seed(0)
net = nn.Linear(4, 3)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
x, y = torch.randn(8, 4), torch.randn(8, 3)
for step in range(3):
    out = net(x)
    mse = ((out - y) ** 2).mean()
    reg = out.abs().mean()
    opt.zero_grad()
    mse.backward(retain_graph=True)
    reg.backward()
    opt.step()
"""


def _verdict(before: str, after: str) -> tuple[str, str]:
    verdict = verify_sources(before, after, timeout=TIMEOUT, intent=FixIntent.unknown())
    return verdict.status, verdict.reason


def test_one_backward_of_the_sum_for_two_backward_calls_is_verified() -> None:
    after = TWO_LOSSES.replace(
        "    mse.backward(retain_graph=True)\n    reg.backward()\n", "    (mse + reg).backward()\n"
    )
    status, reason = _verdict(TWO_LOSSES, after)
    assert status == "verified", reason
    assert "regroups the backward calls (before makes 6, after 3)" in reason


def test_a_loss_term_dropped_with_its_backward_call_is_rejected() -> None:
    after = TWO_LOSSES.replace("    reg.backward()\n", "")
    status, reason = _verdict(TWO_LOSSES, after)
    assert status == "rejected", reason


SECOND_BACKWARD = """\
import torch

torch.manual_seed(0)
model = torch.nn.Linear(5, 2)
out = model(torch.randn(5))
loss = torch.nn.functional.cross_entropy(out, torch.tensor([0.2, 0.8]))
loss.backward()
loss.backward()
print(model.weight.grad)
"""


def test_a_second_backward_dropped_instead_of_retained_is_rejected() -> None:
    dropped = SECOND_BACKWARD.replace("loss.backward()\nloss.backward()\n", "loss.backward()\n")
    status, reason = _verdict(SECOND_BACKWARD, dropped)
    assert status == "rejected", reason
    assert "gradient accumulated wrong" in reason
    kept = SECOND_BACKWARD.replace(
        "loss.backward()\nloss.backward()\n", "loss.backward(retain_graph=True)\nloss.backward()\n"
    )
    status, reason = _verdict(SECOND_BACKWARD, kept)
    assert status == "verified", reason
