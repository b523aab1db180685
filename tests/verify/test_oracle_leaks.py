"""A loss that leaks into another optimizer's parameters, and finite differences that
hold a ``no_grad`` block's reads constant as autograd does.

An actor-critic whose actor loss, backpropagated after the actor's ``zero_grad()``, also
fills the critic's gradient, which the critic's optimizer then steps on: a fix that
freezes the critic while the actor's Q-values are computed stops the leak (verified),
while detaching the action cuts the actor's own gradient (rejected). A Q-learning target
computed under ``torch.no_grad()`` with the network being trained is a constant to
autograd, so a finite-difference run must not see its perturbation there either."""

from __future__ import annotations

from gradfix.verify import verify_sources
from gradfix.verify.intent import FixIntent

TIMEOUT = 60.0

LEAK = """\
import torch
import torch.nn as nn

torch.manual_seed(0)
actor = nn.Linear(3, 2)
critic = nn.Linear(5, 1)
opt_a = torch.optim.SGD(actor.parameters(), lr=0.1)
opt_c = torch.optim.SGD(critic.parameters(), lr=0.1)
for step in range(3):
    obs, act, ret = torch.randn(8, 3), torch.randn(8, 2), torch.randn(8, 1)
    action = torch.tanh(actor(obs))
    q_pi = critic(torch.cat([obs, action], 1))
    q_data = critic(torch.cat([obs, act], 1))
    critic_loss = ((q_data - ret) ** 2).mean()
    actor_loss = -q_pi.mean()
    opt_c.zero_grad()
    critic_loss.backward()
    opt_a.zero_grad()
    actor_loss.backward()
    opt_c.step()
    opt_a.step()
"""


def test_a_fix_that_stops_a_loss_leaking_into_another_optimizer_is_verified() -> None:
    frozen = LEAK.replace(
        "    q_pi = critic(torch.cat([obs, action], 1))\n",
        "    critic.requires_grad_(False)\n"
        "    q_pi = critic(torch.cat([obs, action], 1))\n"
        "    critic.requires_grad_(True)\n",
    )
    verdict = verify_sources(LEAK, frozen, timeout=TIMEOUT, intent=FixIntent.unknown())
    assert verdict.status == "verified", verdict.reason
    assert "a leak after stops" in verdict.reason
    assert verdict.evidence["stopped_leaks"][0] == {"event": 1, "leaf": 2}
    # detaching the action also keeps the actor loss off the critic's update, no: it
    # leaves the leak and cuts the actor's own gradient through the critic
    detached = LEAK.replace("torch.cat([obs, action], 1)", "torch.cat([obs, action.detach()], 1)")
    verdict = verify_sources(LEAK, detached, timeout=TIMEOUT, intent=FixIntent.unknown())
    assert verdict.status == "rejected", verdict.reason
    assert "'actor.weight'" in verdict.reason
    # both optimizers reset before one backward of the sum: every leaf is the loss's own
    together = LEAK.replace(
        "    opt_c.zero_grad()\n    critic_loss.backward()\n    opt_a.zero_grad()\n"
        "    actor_loss.backward()\n",
        "    opt_c.zero_grad()\n    opt_a.zero_grad()\n    (critic_loss + actor_loss).backward()\n",
    )
    detached = together.replace(
        "torch.cat([obs, action], 1)", "torch.cat([obs, action.detach()], 1)"
    )
    verdict = verify_sources(together, detached, timeout=TIMEOUT, intent=FixIntent.unknown())
    assert verdict.status == "rejected", verdict.reason
    assert "leak" not in verdict.reason


TARGET = """\
import torch
import torch.nn as nn

torch.manual_seed(0)
net = nn.Linear(3, 2)
net.weight.normal_(0.0, 0.5)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
for step in range(3):
    s, s2, r = torch.randn(8, 3), torch.randn(8, 3), torch.randn(8)
    q = net(s)[:, 0]
    with torch.no_grad():
        target = r + 0.9 * net(s2).max(1)[0]
    loss = ((q - target) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def test_finite_differences_hold_a_no_grad_target_constant_as_autograd_does() -> None:
    # before raises (an in-place init of a leaf): the fix is checked against finite
    # differences of its own forward, whose TD target autograd holds constant
    fixed = TARGET.replace("net.weight.normal_(0.0, 0.5)", "nn.init.normal_(net.weight, 0.0, 0.5)")
    verdict = verify_sources(TARGET, fixed, timeout=TIMEOUT, intent=FixIntent.unknown())
    assert verdict.status == "verified", verdict.reason
    assert "compared against the fix's own finite differences" in verdict.reason
    # moving the prediction under no_grad too, at a line the change writes, is followed
    # by finite differences: the gradient it loses is seen
    cut = fixed.replace(
        "    q = net(s)[:, 0]\n",
        "    with torch.no_grad():\n        q0 = net(s)[:, 0]\n    q = q0 + 0 * net.bias[0]\n",
    )
    verdict = verify_sources(TARGET, cut, timeout=TIMEOUT, intent=FixIntent.unknown())
    assert verdict.status == "rejected", verdict.reason
