"""A change that moves a stop-gradient instead of removing it: the first backward call
where before's gradient is cut shows a leaf the change now reaches (the discriminator),
but the leaves it meant to repair (the generator's) keep before's cut gradient. Those
agreeing leaves are checked against finite differences of before's forward too, so the
moved cut is rejected, while the move that is right (the discriminator's step, where the
generator is meant to get nothing) and the removal stay accepted."""

from __future__ import annotations

from gradfix.verify import verify_sources
from gradfix.verify.intent import FixIntent

TIMEOUT = 60.0

GENERATOR_STEP = """\
import torch
import torch.nn as nn


class Trainer:
    def __init__(self):
        torch.manual_seed(0)
        self.g = nn.Sequential(nn.Linear(5, 5), nn.Tanh())
        self.d = nn.Sequential(nn.Linear(5, 1), nn.Sigmoid())
        self.opt_g = torch.optim.SGD(self.g.parameters(), lr=0.1)

    def generator_step(self, z, target):
        fake = self.g(z)
        score = self.d(fake).detach()  # the cut
        adversarial = nn.functional.binary_cross_entropy(score, torch.ones_like(score))
        loss = nn.functional.mse_loss(fake, target) + 5.0 * adversarial
        self.opt_g.zero_grad()
        loss.backward()
        self.opt_g.step()
        return loss.item()


trainer = Trainer()
for _ in range(2):
    print(trainer.generator_step(torch.randn(3, 5), torch.rand(3, 5)))
"""
REMOVED = GENERATOR_STEP.replace("self.d(fake).detach()  # the cut", "self.d(fake)")
MOVED = GENERATOR_STEP.replace("self.d(fake).detach()  # the cut", "self.d(fake.detach())")


def test_a_stop_gradient_moved_off_the_discriminator_onto_its_input_is_rejected() -> None:
    verdict = verify_sources(GENERATOR_STEP, MOVED, timeout=TIMEOUT, intent=FixIntent.unknown())
    assert verdict.status == "rejected", verdict.reason
    assert "leaf 0 " in verdict.reason
    assert "finite-difference derivative of before's forward" in verdict.reason


def test_the_stop_gradient_removed_is_verified() -> None:
    verdict = verify_sources(GENERATOR_STEP, REMOVED, timeout=TIMEOUT, intent=FixIntent.unknown())
    assert verdict.status == "verified", verdict.reason


# the discriminator's step: the generator is meant to get nothing from the fake's score,
# and the discriminator everything; the bug detached the score, the fix its input
DISCRIMINATOR_STEP = """\
import torch
import torch.nn as nn

torch.manual_seed(0)
g = nn.Sequential(nn.Linear(5, 5), nn.Tanh())
d = nn.Sequential(nn.Linear(5, 1), nn.Sigmoid())
encoder = nn.Linear(5, 5)
opt_d = torch.optim.SGD(list(d.parameters()) + list(encoder.parameters()), lr=0.1)
bce = nn.BCELoss()
for _ in range(2):
    real = encoder(torch.randn(4, 5))
    fake = g(torch.randn(4, 5))
    loss = bce(d(real), torch.ones(4, 1)) + bce(d(fake).detach(), torch.zeros(4, 1))
    opt_d.zero_grad()
    loss.backward()
    opt_d.step()
    print(round(loss.item(), 4))
"""
DISCRIMINATOR_FIXED = DISCRIMINATOR_STEP.replace("d(fake).detach()", "d(fake.detach())")


def test_the_discriminator_steps_cut_moved_onto_the_fake_is_not_rejected() -> None:
    verdict = verify_sources(
        DISCRIMINATOR_STEP, DISCRIMINATOR_FIXED, timeout=TIMEOUT, intent=FixIntent.unknown()
    )
    assert verdict.status == "verified", verdict.reason


# Both losses computed before the steps: the discriminator's backward then reaches the
# generator's graph, freed by the generator's own backward, and raises. The fix detaches
# the fake in the discriminator's loss; a call made for the discriminator (its optimizer
# zeroed just before it) gives the generator nothing, on purpose.
BOTH_LOSSES = """\
import torch
import torch.nn as nn

torch.manual_seed(0)
G = nn.Sequential(nn.Linear(3, 6), nn.ReLU(), nn.Linear(6, 4))
D = nn.Sequential(nn.Linear(4, 6), nn.LeakyReLU(0.2), nn.Linear(6, 1))
opt_g = torch.optim.Adam(G.parameters(), lr=1e-3)
opt_d = torch.optim.Adam(D.parameters(), lr=1e-3)
bce = nn.BCEWithLogitsLoss()
for step in range(3):
    fake = G(torch.randn(8, 3))
    real = torch.randn(8, 4) + 1.0
    loss_g = bce(D(fake), torch.ones(8, 1))
    loss_d = bce(D(real), torch.ones(8, 1)) + bce(D(fake), torch.zeros(8, 1))
    opt_g.zero_grad()
    loss_g.backward()
    opt_g.step()
    opt_d.zero_grad()
    loss_d.backward()
    opt_d.step()
print(round(loss_d.item(), 4))
"""


def test_a_discriminator_loss_detached_from_the_generator_where_before_raised_is_verified() -> None:
    fixed = BOTH_LOSSES.replace("bce(D(fake), torch.zeros", "bce(D(fake.detach()), torch.zeros")
    verdict = verify_sources(BOTH_LOSSES, fixed, timeout=TIMEOUT, intent=FixIntent.unknown())
    assert verdict.status == "verified", verdict.reason


def test_the_generators_own_loss_detached_where_before_raised_is_rejected() -> None:
    # the cut on the generator's own loss (a call made for it): no leak stopped
    wrong = BOTH_LOSSES.replace("loss_g = bce(D(fake),", "loss_g = bce(D(fake.detach()),")
    verdict = verify_sources(BOTH_LOSSES, wrong, timeout=TIMEOUT, intent=FixIntent.unknown())
    assert verdict.status == "rejected", verdict.reason
