"""What each optimizer step reads: gradient accumulation a change restores (before
resets every micro-batch's gradient unread), a stale gradient a change leaves (nothing
resets it after a step), and accumulation restored for some leaves only."""

from __future__ import annotations

import pytest

from gradfix.verify import verify_sources
from gradfix.verify.intent import FixIntent

TIMEOUT = 60.0

# Gradient accumulation over two micro-batches, broken: both optimizers are cleared
# before every backward, so each step reads the last micro-batch's gradient alone.
ACCUMULATE = """\
import torch
import torch.nn as nn

torch.manual_seed(0)
body, head = nn.Linear(4, 8), nn.Linear(8, 1)
opt_body = torch.optim.SGD(body.parameters(), lr=0.1)
opt_head = torch.optim.SGD(head.parameters(), lr=0.1)
batches = [(torch.randn(5, 4), torch.randn(5, 1)) for _ in range(6)]
for i, (x, y) in enumerate(batches):
    loss = ((head(torch.tanh(body(x))) - y) ** 2).mean() / 2
    opt_body.zero_grad()
    opt_head.zero_grad()
    loss.backward()
    if (i + 1) % 2 == 0:
        opt_body.step()
        opt_head.step()
print(round(loss.item(), 4))
"""
CLEARS = "    opt_body.zero_grad()\n    opt_head.zero_grad()\n"
STEPS = "        opt_body.step()\n        opt_head.step()\n"


def _verdict(after: str) -> tuple[str, str]:
    verdict = verify_sources(ACCUMULATE, after, timeout=TIMEOUT, intent=FixIntent.unknown())
    return verdict.status, verdict.reason


def test_accumulation_the_change_restores_is_verified() -> None:
    fixed = ACCUMULATE.replace(CLEARS, "").replace(
        STEPS, STEPS + "        opt_body.zero_grad()\n        opt_head.zero_grad()\n"
    )
    status, reason = _verdict(fixed)
    assert status == "verified", reason


@pytest.mark.parametrize("read", [False, True])
def test_a_gradient_never_reset_after_a_step_is_rejected(read: bool) -> None:
    wrong = ACCUMULATE.replace(CLEARS, "")
    if read:  # the program reads the gradients before the step does
        wrong = wrong.replace(
            STEPS,
            "        print(sum(p.grad.norm() for p in [*body.parameters(), *head.parameters()]))\n"
            + STEPS,
        )
    status, reason = _verdict(wrong)
    assert status == "rejected", reason
    assert "applies old gradients again" in reason


def test_accumulation_restored_for_some_leaves_only_is_rejected() -> None:
    partial = ACCUMULATE.replace(CLEARS, "    opt_head.zero_grad()\n").replace(
        STEPS, STEPS + "        opt_body.zero_grad()\n"
    )
    status, reason = _verdict(partial)
    assert status == "rejected", reason
    assert "still resets" in reason
