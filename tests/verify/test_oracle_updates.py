"""Changes that alter what is written into the leaves between backward calls (an
optimizer step's update, a target network's copy), not the forward or its gradients: the
first call agrees, a later forward parts. The oracle proves gradients, so such a change is
left unverified, naming the leaves written differently, once a replay that takes
before's writes agrees with before; a forward that still parts in that replay (the change
alters the computation) stays rejected."""

from __future__ import annotations

from gradfix.verify import verify_sources
from gradfix.verify.intent import FixIntent

TIMEOUT = 60.0

# A DQN-style learner whose periodic target update copies the target into itself.
TARGET = """\
import torch
import torch.nn as nn

torch.manual_seed(0)
online, target = nn.Linear(4, 2), nn.Linear(4, 2)
target.load_state_dict(online.state_dict())
opt = torch.optim.SGD(online.parameters(), lr=0.1)
x, x_next, r = torch.randn(8, 4), torch.randn(8, 4), torch.randn(8)
for step in range(5):
    q = online(x).max(-1)[0]
    q_next = target(x_next).max(-1)[0]
    loss = ((q - (r + 0.9 * q_next).detach()) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 2 == 1:
        target.load_state_dict(target.state_dict())
print(loss.item())
"""


def test_a_target_copy_the_change_redirects_is_left_unverified() -> None:
    fixed = TARGET.replace(
        "target.load_state_dict(target.state_dict())", "target.load_state_dict(online.state_dict())"
    )
    verdict = verify_sources(TARGET, fixed, timeout=TIMEOUT, intent=FixIntent.unknown())
    assert verdict.status == "unverified", verdict.reason
    assert "only through what the change writes into the leaves" in verdict.reason
    assert "'target.weight'" in verdict.reason
    assert verdict.evidence["first_judgement"]["status"] == "rejected"


# Gradient clipping moved from before to after the step: the update changes, the
# gradients each backward call gives do not.
CLIPPED = """\
import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.5)
x, y = torch.randn(16, 4), torch.randn(16, 1)
for step in range(4):
    loss = ((model(x) - y) ** 2).mean() * 50
    opt.zero_grad()
    loss.backward()
    opt.step()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
print(loss.item())
"""


def test_clipping_moved_before_the_step_is_left_unverified() -> None:
    fixed = CLIPPED.replace(
        "    opt.step()\n    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)\n",
        "    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)\n    opt.step()\n",
    )
    verdict = verify_sources(CLIPPED, fixed, timeout=TIMEOUT, intent=FixIntent.unknown())
    assert verdict.status == "unverified", verdict.reason
    assert "an optimizer step's update" in verdict.reason


def test_a_loss_changed_from_the_second_step_on_stays_rejected() -> None:
    """The forward parts at the second call because the change computes another loss
    there, not because of what was written: the replay taking before's writes still
    parts, so the first rejection stands."""
    changed = CLIPPED.replace(
        "    loss = ((model(x) - y) ** 2).mean() * 50\n",
        "    loss = ((model(x) - y) ** 2).mean() * 50\n"
        "    if step >= 1:\n"
        "        loss = loss + model[0].weight.abs().sum()\n",
    )
    verdict = verify_sources(CLIPPED, changed, timeout=TIMEOUT, intent=FixIntent.unknown())
    assert verdict.status == "rejected", verdict.reason
    assert "backward call #2" in verdict.reason


# zero_grad moved between backward and step: AdamW skips every parameter whose gradient
# is None, so nothing trains.
ADAMW = """\
import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
x, y = torch.randn(16, 4), torch.randn(16, 1)
for step in range(3):
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
print(loss.item())
"""


def test_steps_that_read_only_reset_gradients_are_rejected() -> None:
    """Positive evidence, not a forward that parts at the second call: after's steps read
    each gradient only once it was reset, so the parameters never train."""
    wrong = ADAMW.replace(
        "    opt.step()\n    opt.zero_grad()\n", "    opt.zero_grad()\n    opt.step()\n"
    )
    verdict = verify_sources(ADAMW, wrong, timeout=TIMEOUT, intent=FixIntent.unknown())
    assert verdict.status == "rejected", verdict.reason
    assert "only once it was reset" in verdict.reason
    assert "never trains" in verdict.reason


# A custom optimizer normalising each gradient by its norm: 0/0 for a zero gradient.
NORMALISED = """\
import torch
import torch.nn as nn


def normalise(g):
    return g / g.norm()


class NormSGD(torch.optim.Optimizer):
    def __init__(self, params, lr):
        super().__init__(params, {"lr": lr})

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.add_(normalise(p.grad), alpha=-group["lr"])


torch.manual_seed(0)
model = nn.Linear(4, 1)
opt = NormSGD(model.parameters(), lr=0.1)
x, y = torch.randn(8, 4), torch.randn(8, 1)
for step in range(3):
    opt.zero_grad()
    ((model(x) - y) ** 2).mean().backward()
    opt.step()
print(model.weight)
"""


def test_a_change_to_the_code_an_optimizer_step_runs_is_unverified() -> None:
    """An eps guard in the optimizer's normalisation: the norm is never that small here,
    so the runs are the same, yet the change is to the update, which the oracle does not
    prove (a clamp at 1.0 there would change it where no gradient shows)."""
    clamped = NORMALISED.replace("g / g.norm()", "g / g.norm().clamp(min=1e-8)")
    verdict = verify_sources(NORMALISED, clamped, timeout=TIMEOUT, intent=FixIntent.unknown())
    assert verdict.status == "unverified", verdict.reason
    assert "rewrites code an optimizer step runs (line 6)" in verdict.reason
    assert verdict.evidence["update_rewritten"] == {"after": [6], "before": [6]}


# Gradient accumulation with the step condition inverted: the steps follow 3 of every 4
# micro-batches. The fix steps on the 4th; moving `zero_grad()` to the top of the loop as
# well throws the first three micro-batches' gradients away.
ACCUMULATION = """\
import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 2))
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
batches = [(torch.randn(3, 4), torch.randn(3, 2)) for _ in range(8)]
for i, (x, y) in enumerate(batches):
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    if i % 4:
        opt.step()
        opt.zero_grad()
print(round(loss.item(), 4))
"""


def test_the_accumulation_condition_fixed_is_a_change_of_updates_not_rejected() -> None:
    fixed = ACCUMULATION.replace("if i % 4:", "if i % 4 == 3:")
    verdict = verify_sources(ACCUMULATION, fixed, timeout=60.0, intent=FixIntent.unknown())
    assert verdict.status == "unverified", verdict.reason
    assert "only through what the change writes into the leaves" in verdict.reason


def test_micro_batch_gradients_reset_unread_are_rejected() -> None:
    wrong = ACCUMULATION.replace("if i % 4:", "if i % 4 == 3:").replace(
        "    loss = ((model", "    opt.zero_grad()\n    loss = ((model"
    )
    verdict = verify_sources(ACCUMULATION, wrong, timeout=60.0, intent=FixIntent.unknown())
    assert verdict.status == "rejected", verdict.reason
    assert "before anything reads it" in verdict.reason


# A GAN whose discriminator step calls the generator's optimizer again: the generator is
# stepped twice on the same gradients and the discriminator never trains.
TWICE = """\
import torch
import torch.nn as nn

torch.manual_seed(0)
g, d = nn.Linear(3, 4), nn.Linear(4, 1)
opt_g = torch.optim.Adam(g.parameters(), lr=1e-2)
opt_d = torch.optim.Adam(d.parameters(), lr=1e-2)
bce = nn.BCEWithLogitsLoss()
for step in range(3):
    opt_g.zero_grad()
    fake = g(torch.randn(8, 3))
    bce(d(fake), torch.ones(8, 1)).backward()
    opt_g.step()
    opt_d.zero_grad()
    loss_d = bce(d(torch.randn(8, 4)), torch.ones(8, 1)) + bce(d(fake.detach()), torch.zeros(8, 1))
    loss_d.backward()
    opt_g.step()
"""


def test_a_change_that_keeps_a_second_step_on_the_same_gradients_is_no_proof() -> None:
    head, tail = TWICE.rsplit("    opt_g.step()\n", 1)
    both = head + "    opt_g.step()\n    opt_d.step()\n" + tail  # the D step added, G's kept
    verdict = verify_sources(TWICE, both, timeout=60.0, intent=FixIntent.unknown())
    assert verdict.status == "unverified", verdict.reason
    assert "the same gradients stepped on twice" in verdict.reason
    fixed = head + "    opt_d.step()\n" + tail
    verdict = verify_sources(TWICE, fixed, timeout=60.0, intent=FixIntent.unknown())
    assert "stepped on twice" not in verdict.reason
