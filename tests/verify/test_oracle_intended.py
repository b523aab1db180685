"""Fixes whose runs part from the original's on purpose, shown by the program itself: a
loss rebuilt as a new leaf each step (finite differences must follow its values), a
sample reused after the step that changed its weights (no eps guard), a freeze the
program asked for on the tensor it then replaced, and a parameter made frozen that a
blanket ``model.requires_grad_(True)`` unfroze."""

from __future__ import annotations

from gradfix.verify import verify_sources
from gradfix.verify.intent import FixIntent

TIMEOUT = 60.0

# Stage losses copied into a new leaf: the network gets no gradient.
REBUILT = """\
import torch
import torch.nn as nn

torch.manual_seed(0)
stages = nn.ModuleList([nn.Linear(4, 4) for _ in range(3)])
opt = torch.optim.Adam(stages.parameters(), lr=1e-2)
x, target = torch.randn(8, 4), torch.randn(8, 4)
for step in range(2):
    outs, h = [], x
    for stage in stages:
        h = torch.tanh(stage(h))
        outs.append(h)
    loss = torch.tensor([((o - target) ** 2).mean() for o in outs], requires_grad=True).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def test_a_loss_rebuilt_as_a_new_leaf_is_differentiated_through_its_values() -> None:
    fixed = REBUILT.replace("torch.tensor([", "torch.stack([").replace(
        "], requires_grad=True).sum()", "]).sum()"
    )
    verdict = verify_sources(REBUILT, fixed, timeout=TIMEOUT, intent=FixIntent.unknown())
    assert verdict.status == "verified", verdict.reason


# The generator's steps reuse the sample made before them: the second backward goes
# through weights the first step changed ("modified by an inplace operation").
REUSED = """\
import torch
import torch.nn as nn

torch.manual_seed(0)
netG = nn.Sequential(nn.Linear(8, 16), nn.LeakyReLU(0.2), nn.Linear(16, 8))
netD = nn.Sequential(nn.Linear(8, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1))
opt = torch.optim.Adam(netG.parameters(), lr=5e-4)
noise = torch.randn(4, 8)
fake = netG(noise)
for j in range(3):
    netG.zero_grad()
    (-netD(fake).mean()).backward(retain_graph=True)
    opt.step()
"""


def test_a_sample_made_again_after_the_step_is_no_eps_guard() -> None:
    fixed = REUSED.replace(
        "    netG.zero_grad()\n", "    netG.zero_grad()\n    fake = netG(noise)\n"
    )
    verdict = verify_sources(REUSED, fixed, timeout=TIMEOUT, intent=FixIntent.unknown())
    assert verdict.status == "verified", verdict.reason
    assert "eps guard" not in verdict.reason


# The flag is set on the layer's weight, which is then replaced by a new parameter: the
# parameter meant to stay fixed trains.
FREEZE = """\
import torch
import torch.nn as nn


class Fixed(nn.Linear):
    def __init__(self):
        super().__init__(4, 4, bias=False)
        signs = torch.randint(0, 2, (4, 4)).float() * 2 - 1
        self.weight.requires_grad = False
        self.weight = nn.Parameter(signs)


torch.manual_seed(0)
model = nn.Sequential(Fixed(), nn.Tanh(), nn.Linear(4, 1))
opt = torch.optim.SGD(filter(lambda p: p.requires_grad, model.parameters()), lr=0.1)
x, y = torch.randn(8, 4), torch.randn(8, 1)
for step in range(3):
    opt.zero_grad()
    ((model(x) - y) ** 2).mean().backward()
    opt.step()
"""


def test_a_freeze_the_program_asked_for_is_kept_on_the_parameter_it_uses() -> None:
    fixed = FREEZE.replace(
        "        self.weight.requires_grad = False\n        self.weight = nn.Parameter(signs)\n",
        "        self.weight = nn.Parameter(signs)\n        self.weight.requires_grad = False\n",
    )
    verdict = verify_sources(FREEZE, fixed, timeout=TIMEOUT, intent=FixIntent.unknown())
    assert verdict.status == "verified", verdict.reason
    # freezing another layer, which the program never asked for, is not
    other = FREEZE.replace(
        "model = nn.Sequential(Fixed(), nn.Tanh(), nn.Linear(4, 1))\n",
        "model = nn.Sequential(Fixed(), nn.Tanh(), nn.Linear(4, 1))\n"
        "model[2].weight.requires_grad = False\n",
    )
    verdict = verify_sources(FREEZE, other, timeout=TIMEOUT, intent=FixIntent.unknown())
    assert verdict.status != "verified", verdict.reason


# A random projection made a frozen nn.Parameter; stage two unfreezes the whole model,
# which trains the projection too. The fix keeps it as a buffer.
STAGES = """\
import torch
import torch.nn as nn


class Encoding(nn.Module):
    def __init__(self):
        super().__init__()
        self.b = nn.Parameter(torch.randn(8, 2), requires_grad=False)

    def forward(self, v):
        return torch.cos(v @ self.b.T)


torch.manual_seed(0)
model = nn.Sequential(nn.Linear(2, 2), Encoding(), nn.Linear(8, 1))
x, y = torch.rand(16, 2), torch.rand(16, 1)
model.requires_grad_(False)
model[2].requires_grad_(True)
opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-2)
for step in range(2):
    opt.zero_grad()
    ((model(x) - y) ** 2).mean().backward()
    opt.step()
model.requires_grad_(True)
opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-2)
for step in range(2):
    opt.zero_grad()
    ((model(x) - y) ** 2).mean().backward()
    opt.step()
"""


def test_a_parameter_made_frozen_stays_frozen_against_a_blanket_unfreeze() -> None:
    buffer = STAGES.replace(
        "self.b = nn.Parameter(torch.randn(8, 2), requires_grad=False)",
        'self.register_buffer("b", torch.randn(8, 2))',
    )
    verdict = verify_sources(STAGES, buffer, timeout=TIMEOUT, intent=FixIntent.unknown())
    assert verdict.status == "verified", verdict.reason
    assert "before replayed with leaf" in verdict.reason and "model.1.b" in verdict.reason
    # the stage-one freeze that stage two lifts is no freeze to keep: a change that
    # leaves the program as it is keeps every parameter training in stage two
    same = STAGES.replace("    opt.zero_grad()\n", "    opt.zero_grad()  # stage\n", 1)
    verdict = verify_sources(STAGES, same, timeout=TIMEOUT, intent=FixIntent.unknown())
    assert verdict.status == "verified", verdict.reason
    assert "before replayed" not in verdict.reason
    # dropping the frozen projection's Parameter wrapper alone does not make the first
    # linear layer stop training: freezing it too is a change the program never asked
    # for, the change's own intent, which the run cannot prove (nor disprove)
    frozen = buffer.replace(
        "model.requires_grad_(True)\n",
        "model.requires_grad_(True)\nmodel[0].requires_grad_(False)\n",
    )
    verdict = verify_sources(STAGES, frozen, timeout=TIMEOUT, intent=FixIntent.unknown())
    assert verdict.status == "unverified", verdict.reason
    assert verdict.reason.startswith("the change freezes 2 leaf tensor(s) before trains")


# An evolved weight re-wrapped in a fresh nn.Parameter in forward: the GRU and the
# initial weight are cut out of the graph (a new leaf from a computed value).
REWRAP = """\
import torch
import torch.nn as nn


class Evolve(nn.Module):
    def __init__(self):
        super().__init__()
        self.initial = nn.Parameter(torch.randn(3, 3) * 0.3)
        self.cell = nn.GRUCell(3, 3)
        self.lin = nn.Linear(3, 3, bias=False)

    def forward(self, x):
        w = self.cell(self.initial, self.initial)
        self.lin.weight = nn.Parameter(w)
        return self.lin(x)


torch.manual_seed(0)
model = Evolve()
model(torch.randn(4, 3)).pow(2).sum().backward()
"""


def test_a_parameter_rewrapped_from_a_computed_value_is_a_cut_finite_differences_see() -> None:
    fixed = REWRAP.replace(
        "        self.lin.weight = nn.Parameter(w)\n        return self.lin(x)\n",
        "        return x @ w.t()\n",
    )
    verdict = verify_sources(REWRAP, fixed, timeout=TIMEOUT, intent=FixIntent.unknown())
    assert verdict.status == "verified", verdict.reason


# The discriminator frozen (requires_grad False) for the generator's loss: its `.grad`
# still holds the discriminator step's gradient, so the call adds nothing to it.
FROZEN_D = """\
import torch
import torch.nn as nn

torch.manual_seed(0)
netG, netD = nn.Linear(2, 4), nn.Linear(4, 1)
netG.weight.normal_(0.0, 0.5)
optD = torch.optim.SGD(netD.parameters(), lr=0.1)
optG = torch.optim.SGD(netG.parameters(), lr=0.1)
for step in range(2):
    fake = netG(torch.randn(8, 2))
    netD.zero_grad()
    netD(fake.detach()).mean().backward()
    optD.step()
    netD.requires_grad_(False)
    netG.zero_grad()
    (-netD(fake).mean()).backward()
    optG.step()
    netD.requires_grad_(True)
"""


def test_a_leaf_frozen_at_a_call_expects_no_gradient_from_it_in_the_fix_s_own_check() -> None:
    # before raises at the in-place init: the fix is checked against finite differences of
    # its own forward, which see the frozen discriminator's weights; no gradient is meant
    fixed = FROZEN_D.replace(
        "netG.weight.normal_(0.0, 0.5)", "nn.init.normal_(netG.weight, 0.0, 0.5)"
    )
    verdict = verify_sources(FROZEN_D, fixed, timeout=TIMEOUT, intent=FixIntent.unknown())
    assert verdict.status == "verified", verdict.reason


# A critic trained on a bootstrapped target that still carries the graph: the gradient is
# the true derivative of the squared error, but TD learning holds the target constant.
TD_TARGET = """\
import torch
import torch.nn as nn

torch.manual_seed(0)
critic = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 1))
opt = torch.optim.SGD(critic.parameters(), lr=1e-2)
s, s_next, r = torch.randn(6, 3), torch.randn(6, 3), torch.randn(6, 1)
for step in range(2):
    target = r + 0.9 * critic(s_next)
    loss = ((critic(s) - target) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def test_a_stop_gradient_the_change_adds_is_intent_not_evidence() -> None:
    fixed = TD_TARGET.replace("0.9 * critic(s_next)", "0.9 * critic(s_next).detach()")
    verdict = verify_sources(TD_TARGET, fixed, timeout=TIMEOUT, intent=FixIntent.unknown())
    assert verdict.status == "unverified", verdict.reason
    assert "adds a stop-gradient (line 9: `target = r + 0.9 * critic(s_next).detach()`)" in (
        verdict.reason
    )
    # the same gradient change without a stop-gradient is still evidence: rejected
    scaled = TD_TARGET.replace("0.9 * critic(s_next)", "0.9 * critic(s_next) * 0.5")
    wrong = verify_sources(TD_TARGET, scaled, timeout=TIMEOUT, intent=FixIntent.unknown())
    assert wrong.status == "rejected", wrong.reason


def test_the_added_stop_gradient_is_read_from_the_change() -> None:
    def added(before: str, after: str) -> str:
        return FixIntent.unknown().for_change(before, after).adds_stop_gradient

    assert added("y = f(x)\n", "y = f(x.detach())\n") == "line 1: `y = f(x.detach())`"
    assert added("y = f(x)\n", "with torch.no_grad():\n    y = f(x)\n") == (
        "line 1: `with torch.no_grad():`"
    )
    # moved within a line, kept in a comment, or declared by a rule: none added
    assert added("y = x.detach() + z\n", "y = z + x.detach()\n") == ""
    assert added("y = f(x)\n", "y = f(x)  # not x.detach()\n") == ""
    assert FixIntent(declared=True).for_change("y = f(x)\n", "y = f(x.detach())\n") == (
        FixIntent(declared=True)
    )


# ``module.requires_grad = False`` sets an attribute, which freezes nothing: the head
# the program asks to freeze still trains.
MODULE_ATTRIBUTE = """\
import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
model[2].requires_grad = False
opt = torch.optim.SGD(model.parameters(), lr=0.5)
x, y = torch.randn(16, 4), torch.randint(0, 2, (16,))
for step in range(3):
    opt.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
"""


def test_a_freeze_asked_as_a_module_attribute_and_made_by_the_optimizer_is_kept() -> None:
    """The fix leaves the head out of the optimizer: it stops training, as the program's
    statement asked, so before is replayed with the head held (not a changed forward)."""
    fixed = MODULE_ATTRIBUTE.replace("model[2].requires_grad = False\n", "").replace(
        "torch.optim.SGD(model.parameters(), lr=0.5)",
        "torch.optim.SGD(model[0].parameters(), lr=0.5)",
    )
    verdict = verify_sources(MODULE_ATTRIBUTE, fixed, timeout=TIMEOUT, intent=FixIntent.unknown())
    assert verdict.status == "verified", verdict.reason
    # a change that leaves the attribute and the training as they were is no fix
    same = MODULE_ATTRIBUTE.replace("opt.zero_grad()\n", "opt.zero_grad(set_to_none=True)\n")
    verdict = verify_sources(MODULE_ATTRIBUTE, same, timeout=TIMEOUT, intent=FixIntent.unknown())
    assert verdict.status == "unverified", verdict.reason
    assert "sets `requires_grad` as an attribute of a module" in verdict.reason


def test_a_freeze_asked_as_a_module_attribute_and_made_on_its_parameters_is_kept() -> None:
    """The fix freezes the head's parameters themselves: their gradient is None where
    before's is not, which is the freeze the program's statement asked for."""
    fixed = MODULE_ATTRIBUTE.replace(
        "model[2].requires_grad = False\n", "model[2].requires_grad_(False)\n"
    )
    verdict = verify_sources(MODULE_ATTRIBUTE, fixed, timeout=TIMEOUT, intent=FixIntent.unknown())
    assert verdict.status == "verified", verdict.reason


# the freeze loop of a fine-tuning snippet with `requires_grad` misspelt: a plain Python
# attribute on each parameter, which freezes nothing
MISSPELT = """\
import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
for param in model[0].parameters():
    param.require_grad = False
opt = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
x, y = torch.randn(16, 4), torch.randint(0, 2, (16,))
for step in range(3):
    opt.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
"""


def test_a_freeze_asked_with_a_misspelt_flag_and_made_with_the_flag_is_kept() -> None:
    fixed = MISSPELT.replace("param.require_grad = False", "param.requires_grad = False")
    verdict = verify_sources(MISSPELT, fixed, timeout=TIMEOUT, intent=FixIntent.unknown())
    assert verdict.status == "verified", verdict.reason


def test_a_change_that_misspells_the_flag_again_is_no_fix() -> None:
    again = MISSPELT.replace("param.require_grad = False", "param.requires_grad_ = False")
    verdict = verify_sources(MISSPELT, again, timeout=TIMEOUT, intent=FixIntent.unknown())
    assert verdict.status == "unverified", verdict.reason
    assert "sets `requires_grad_` on a tensor, an attribute autograd never reads" in verdict.reason


FINETUNE = """\
import torch
import torch.nn as nn

torch.manual_seed(0)
backbone, head = nn.Linear(4, 6), nn.Linear(6, 2)
model = nn.Sequential(backbone, nn.Tanh(), head)
opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.5)
x, y = torch.randn(16, 4), torch.randint(0, 2, (16,))
for step in range(3):
    opt.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
"""


def test_a_freeze_the_change_writes_is_its_intent_not_a_rejection() -> None:
    frozen = FINETUNE.replace(
        "opt = torch.optim", "backbone.weight.requires_grad = False\nopt = torch.optim"
    )
    verdict = verify_sources(FINETUNE, frozen, timeout=TIMEOUT, intent=FixIntent.unknown())
    assert verdict.status == "unverified", verdict.reason
    assert verdict.reason.startswith("the change freezes 1 leaf tensor(s) before trains")


# A layer frozen after a first stage, with `zero_grad(set_to_none=False)`: its `.grad`
# stays a zero tensor, and Adam's momentum keeps moving the frozen layer.
DRIFT = """\
import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 2))
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
x, y = torch.randn(16, 4), torch.randint(0, 2, (16,))
for stage in range(2):
    if stage == 1:
        for p in model[0].parameters():
            p.requires_grad = False
    for step in range(3):
        opt.zero_grad(set_to_none=False)
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
"""


def test_a_freeze_made_effective_against_momentum_is_verified() -> None:
    fixed = DRIFT.replace(
        "            p.requires_grad = False\n",
        "            p.requires_grad = False\n            p.grad = None\n",
    )
    verdict = verify_sources(DRIFT, fixed, timeout=TIMEOUT, intent=FixIntent.unknown())
    assert verdict.status == "verified", verdict.reason
    assert "held at the optimizer steps made while they do not require grad" in verdict.reason


def test_a_change_that_leaves_a_frozen_layer_moving_is_no_fix() -> None:
    zeroed = DRIFT.replace(
        "            p.requires_grad = False\n",
        "            p.requires_grad = False\n            p.grad.zero_()\n",
    )
    verdict = verify_sources(DRIFT, zeroed, timeout=TIMEOUT, intent=FixIntent.unknown())
    assert verdict.status == "unverified", verdict.reason
    assert "frozen, they still move" in verdict.reason


# A threshold that selects elements by a comparison: its gradient is None, and the loss
# does not depend on it but in steps.
HARD_MASK = """\
import torch

torch.manual_seed(0)
x = torch.randn(50, requires_grad=True)
threshold = torch.tensor(0.5, requires_grad=True)
opt = torch.optim.SGD([x, threshold], lr=0.05)
for _ in range(3):
    opt.zero_grad()
    kept = x[x < threshold].mean()
    loss = (kept - 0.2) ** 2
    loss.backward()
    opt.step()
"""
SOFT_MASK = HARD_MASK.replace(
    "    kept = x[x < threshold].mean()\n",
    "    mask = torch.sigmoid(10.0 * (threshold - x))\n    kept = (mask * x).sum() / mask.sum()\n",
)
# The threshold read through `.detach()` into a smooth mask: the forward depends on it.
CUT_MASK = SOFT_MASK.replace("(threshold - x)", "(threshold.detach() - x)")


def test_a_new_objective_that_trains_a_leaf_the_forward_did_not_depend_on_is_undecided() -> None:
    """A soft mask for a hard one: to train the threshold the forward must change."""
    verdict = verify_sources(HARD_MASK, SOFT_MASK, timeout=TIMEOUT, intent=FixIntent.unknown())
    assert verdict.status == "unverified", verdict.reason
    assert "forward changed" in verdict.reason
    assert "before's forward does not depend on" in verdict.reason
    # the leaf reached by the forward of the original through a cut: a fix that trains it
    # keeps the forward, so a changed forward is evidence
    changed = SOFT_MASK.replace("10.0 *", "12.0 *")
    verdict = verify_sources(CUT_MASK, changed, timeout=TIMEOUT, intent=FixIntent.unknown())
    assert verdict.status == "rejected", verdict.reason
    assert "forward changed" in verdict.reason


# A 0-1 loss made a fresh leaf: the model's parameters get no gradient.
ZERO_ONE = """\
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
model = nn.Linear(3, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.5)
x = torch.randn(16, 3)
y = (x[:, :1] > 0).float()
for _ in range(3):
    opt.zero_grad()
    prob = torch.sigmoid(model(x))
    loss = torch.tensor(((prob > 0.5).float() != y).float().mean().item(), requires_grad=True)
    loss.backward()
    opt.step()
"""


def test_a_new_loss_for_a_model_the_old_one_did_not_depend_on_is_undecided() -> None:
    """Every leaf the change makes train (weight and bias) is shown independent of before's
    forward (their estimates asked for in one round)."""
    soft = ZERO_ONE.replace(
        "    loss = torch.tensor(((prob > 0.5).float() != y).float().mean().item(), "
        "requires_grad=True)\n",
        "    loss = F.binary_cross_entropy(prob, y)\n",
    )
    verdict = verify_sources(ZERO_ONE, soft, timeout=TIMEOUT, intent=FixIntent.unknown())
    assert verdict.status == "unverified", verdict.reason
    assert "before's forward does not depend on #0 'model.weight'" in verdict.reason
    assert "'model.bias'" in verdict.reason
