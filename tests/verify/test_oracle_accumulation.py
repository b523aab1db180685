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


# A GAN: the discriminator's gradients from the generator's loss are reset unread by the
# next iteration's zero_grad(), never stepped with.
GAN = """\
import torch
import torch.nn as nn

torch.manual_seed(0)
G = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 4))
D = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1), nn.Sigmoid())
opt_D = torch.optim.SGD(D.parameters(), lr=0.1)
opt_G = torch.optim.SGD(G.parameters(), lr=0.1)
for step in range(3):
    real, fake = torch.randn(6, 4), G(torch.randn(6, 3))
    D_loss = -torch.mean(torch.log(D(real)) + torch.log(1.0 - D(fake.detach())))
    opt_D.zero_grad()
    D_loss.backward()
    opt_D.step()
    G_loss = torch.mean(torch.log(1.0 - D(fake)))
    opt_G.zero_grad()
    G_loss.backward()
    opt_G.step()
"""


def test_a_step_on_the_gradient_of_another_loss_is_rejected() -> None:
    # the discriminator's step moved after the generator's backward
    wrong = GAN.replace("    opt_D.step()\n", "").replace(
        "    opt_G.step()\n", "    opt_D.step()\n    opt_G.step()\n"
    )
    verdict = verify_sources(GAN, wrong, timeout=TIMEOUT, intent=FixIntent.unknown())
    assert verdict.status == "rejected", verdict.reason
    assert "`G_loss.backward()`" in verdict.reason and "D.0.weight" in verdict.reason
    # a change that keeps what each step reads is verified
    same = GAN.replace("range(3)", "range(0, 3)")
    verdict = verify_sources(GAN, same, timeout=TIMEOUT, intent=FixIntent.unknown())
    assert verdict.status == "verified", verdict.reason


def test_a_reset_the_change_adds_that_leaves_steps_stale_is_rejected() -> None:
    """The original never clears its gradients (every step applies all earlier ones);
    a change that adds one ``zero_grad()`` before the loop still steps on stale sums."""
    never = ACCUMULATE.replace(CLEARS, "").replace("    if (i + 1) % 2 == 0:\n", "    if True:\n")
    once = never.replace(
        "for i, (x, y) in enumerate(batches):\n",
        "opt_body.zero_grad()\nopt_head.zero_grad()\nfor i, (x, y) in enumerate(batches):\n",
    )
    status, reason = _verdict_of(never, once)
    assert status == "rejected", reason
    assert "the change adds a gradient reset" in reason
    each = never.replace("    loss.backward()\n", CLEARS + "    loss.backward()\n")
    status, reason = _verdict_of(never, each)
    assert status == "verified", reason


def _verdict_of(before: str, after: str) -> tuple[str, str]:
    verdict = verify_sources(before, after, timeout=TIMEOUT, intent=FixIntent.unknown())
    return verdict.status, verdict.reason


# Gradient accumulation over two micro-batches, the loss not averaged.
UNSCALED = """\
import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
data = torch.randn(4, 8, 4)
for i, x in enumerate(data):
    out = model(x)
    loss = out.pow(2).mean() + 0.1 * out.abs().mean()
    loss.backward()
    if i % 2 == 1:
        opt.step()
        opt.zero_grad()
"""


def test_a_loss_averaged_over_its_micro_batches_is_a_rescaled_objective() -> None:
    scaled = UNSCALED.replace("    loss.backward()\n", "    loss = loss / 2\n    loss.backward()\n")
    status, reason = _verdict_of(UNSCALED, scaled)
    assert status == "verified", reason
    assert "multiplies the objective by 0.5" in reason
    # scaling one term only is another objective
    one_term = UNSCALED.replace(
        "loss = out.pow(2).mean() + 0.1 * out.abs().mean()",
        "loss = out.pow(2).mean() / 2 + 0.1 * out.abs().mean()",
    )
    status, reason = _verdict_of(UNSCALED, one_term)
    assert status == "rejected", reason
