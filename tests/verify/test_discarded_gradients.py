"""Gradients a program discards unread: the runner sees them, the oracle does not compare
them (a GAN's discriminator step detached from the generator, whose ``zero_grad()``
throws away what that step gave it)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from gradfix.verify import compare_traces, plan_fd, verify_sources

from .test_oracle import event, tensor, trace

RECORD = """\
import json, sys, types
from gradfix.verify import instrument
instrument.install()
source = sys.stdin.read()
recorder = instrument.Recorder("script.py")
module = types.ModuleType("__main__")
recorder.namespace = module.__dict__
instrument.activate(recorder)
try:
    exec(compile(source, "script.py", "exec"), module.__dict__)
finally:
    instrument.activate(None)
print(json.dumps([e.get("discarded") for e in recorder.events]))
"""


def discarded(script: str) -> list[list[int]]:
    """``discarded`` of each backward call of ``script`` run under the recorder."""
    ran = subprocess.run(
        [sys.executable, "-c", RECORD],
        input=textwrap.dedent(script),
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return json.loads(ran.stdout.splitlines()[-1])


PRELUDE = """\
import torch
w = torch.randn(3, requires_grad=True)
opt = torch.optim.SGD([w], lr=0.1)
(w * w).sum().backward()
"""


@pytest.mark.parametrize(
    ("then", "expected"),
    [
        ("w.grad = None", [[0], []]),
        ("del w.grad", [[0], []]),
        ("opt.zero_grad()", [[0], []]),
        ("opt.zero_grad(set_to_none=False)", [[0], []]),
        ("torch.nn.Linear(3, 1).zero_grad()", [[], []]),  # another module's parameters
        ("opt.step()\nopt.zero_grad()", [[], []]),  # the step reads it
        ("print(w.grad.norm())\nw.grad = None", [[], []]),  # the program reads it
        ("", [[], []]),  # still there when the program ends
    ],
)
def test_a_gradient_reset_before_any_read_is_discarded(then: str, expected: list) -> None:
    script = PRELUDE + then + "\n(w * 2).sum().backward()\n"
    assert discarded(script) == expected


def test_a_hook_that_reads_the_gradient_during_backward_uses_it() -> None:
    script = """\
    import torch
    w = torch.randn(3, requires_grad=True)
    seen = []
    w.register_post_accumulate_grad_hook(lambda p: seen.append(p.grad.sum()))
    (w * w).sum().backward()
    w.grad = None
    """
    assert discarded(script) == [[]]


# -- the oracle ---------------------------------------------------------------------------
def discarding(grads: dict, leaves: list[int]) -> dict:
    made = event(1.0, grads)
    made["discarded"] = leaves
    return made


def test_a_gradient_both_versions_discard_is_not_compared() -> None:
    before = trace(discarding({0: tensor([1.0, 2.0]), 1: tensor([3.0, 4.0])}, [1]), leaves=2)
    after = trace(discarding({0: tensor([1.0, 2.0]), 1: None}, [1]), leaves=2)
    assert plan_fd(before, after) == {}
    verdict = compare_traces(before, after)
    assert verdict.status == "verified", verdict.reason
    assert verdict.evidence["discarded_gradients"] == [{"event": 0, "leaf": 1}]
    assert "discarded unread" in verdict.reason
    # discarded in one version only: the other reads it
    kept = trace(discarding({0: tensor([1.0, 2.0]), 1: None}, []), leaves=2)
    assert "None where before computes one" in compare_traces(before, kept).reason
    read = trace(discarding({0: tensor([1.0, 2.0]), 1: tensor([3.0, 4.0])}, []), leaves=2)
    assert "None where before computes one" in compare_traces(read, after).reason


def test_the_fix_own_discarded_gradient_needs_no_finite_differences() -> None:
    raised = trace(event(0.0, {}, error="boom"), outcome={"status": "error", "type": "X"})
    raised["event_count"] = 0
    raised["events"] = []
    after = trace(discarding({0: tensor([1.0, 2.0])}, [0]))
    assert plan_fd(raised, after) == {}


# -- a GAN's discriminator step ----------------------------------------------------------
GAN = """\
import torch
from torch import nn

torch.manual_seed(0)
netG = nn.Sequential(nn.Linear(2, 4), nn.Tanh())
netD = nn.Sequential(nn.Linear(4, 1), nn.Sigmoid())
# Adam, as DCGAN: its first steps move each weight by about lr, whatever the gradient, so
# finite differences of before's forward at G's raising backward (perturbing netG before
# D's step) see next to nothing of D's update; with SGD they would, and autograd never does
optD = torch.optim.Adam(netD.parameters(), lr=0.01)
optG = torch.optim.Adam(netG.parameters(), lr=0.01)
bce = nn.BCELoss()
for real in torch.randn(2, 8, 4):
    netD.zero_grad()
    fake = netG(torch.randn(8, 2))
    errD = bce(netD(real), torch.ones(8, 1)) + bce(netD(fake), torch.zeros(8, 1))
    errD.backward()
    optD.step()
    netG.zero_grad()
    errG = bce(netD(fake), torch.ones(8, 1))
    errG.backward()
    optG.step()
"""


def test_the_discriminator_step_detached_from_the_generator_is_verified() -> None:
    fixed = GAN.replace("bce(netD(fake), torch.zeros", "bce(netD(fake.detach()), torch.zeros")
    verdict = verify_sources(GAN, fixed, timeout=60.0)
    assert verdict.status == "verified", verdict.reason
    assert verdict.evidence["discarded_gradients"]


def test_a_detach_whose_lost_gradient_the_program_steps_with_is_rejected() -> None:
    # the generator steps on what the discriminator's loss gave it before resetting it
    stepped = GAN.replace("    optD.step()\n", "    optD.step()\n    optG.step()\n")
    fixed = stepped.replace("bce(netD(fake), torch.zeros", "bce(netD(fake.detach()), torch.zeros")
    verdict = verify_sources(stepped, fixed, timeout=60.0)
    assert verdict.status == "rejected", verdict.reason
    assert "None where before computes one" in verdict.reason
