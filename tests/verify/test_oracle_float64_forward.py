"""A forward that float32 cannot compute (a softmax that underflows to 0 before its
``log``) is judged against the same program run in float64: a stable form computes that
value and is verified by its own finite differences; a guard that changes it (an eps, a
clamp) is unverified, never rejected and never verified."""

from __future__ import annotations

from gradfix.verify import verify_sources
from gradfix.verify.intent import FixIntent

TIMEOUT = 60.0

UNDERFLOW = """\
import torch
import torch.nn as nn

torch.manual_seed(0)
net = nn.Linear(4, 3)
with torch.no_grad():
    net.weight.mul_(200.0)
x = torch.randn(6, 4)
labels = nn.functional.one_hot(torch.tensor([0, 1, 2, 1, 0, 2]), 3).float()
probs = torch.softmax(net(x), dim=-1)
loss = -(torch.log(probs) * labels).sum()
loss.backward()
"""


def _verdict(after: str) -> tuple[str, str]:
    verdict = verify_sources(UNDERFLOW, after, timeout=TIMEOUT, intent=FixIntent.unknown())
    return verdict.status, verdict.reason


def test_the_stable_form_is_verified_against_the_float64_forward() -> None:
    stable = UNDERFLOW.replace(
        "probs = torch.softmax(net(x), dim=-1)\nloss = -(torch.log(probs) * labels).sum()",
        "loss = -(torch.log_softmax(net(x), dim=-1) * labels).sum()",
    )
    status, reason = _verdict(stable)
    assert status == "verified", reason


def test_a_guard_that_changes_the_float64_forward_is_unverified() -> None:
    guarded = UNDERFLOW.replace("torch.log(probs)", "torch.log(probs + 1e-10)")
    status, reason = _verdict(guarded)
    assert status == "unverified", reason
    assert "before run in float64 computes" in reason
