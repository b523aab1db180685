"""A change that computes exactly what the original computes is a proven refactor, and its
verdict says so: meant as a fix, its bug does not show in this run (a buffer registered
for a tensor the optimizer never saw keeps the keys untrained, as before)."""

from __future__ import annotations

from gradfix.verify import verify_sources
from gradfix.verify.intent import FixIntent

MEMORY = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


class Memory(nn.Module):
    def __init__(self):
        super().__init__()
        self.keys = torch.randn(3, 4)

    def forward(self, x):
        return F.softmax(x @ self.keys.t(), dim=-1) @ self.keys


torch.manual_seed(0)
model = nn.Sequential(nn.Linear(6, 4), Memory())
opt = torch.optim.Adam(model.parameters(), lr=0.1)
x, y = torch.randn(5, 6), torch.randn(5, 4)
for _ in range(2):
    opt.zero_grad()
    F.mse_loss(model(x), y).backward()
    opt.step()
"""


def test_a_change_that_computes_what_the_original_does_says_so() -> None:
    buffer = MEMORY.replace(
        "self.keys = torch.randn(3, 4)", 'self.register_buffer("keys", torch.randn(3, 4))'
    )
    verdict = verify_sources(MEMORY, buffer, timeout=60.0, intent=FixIntent.unknown())
    assert verdict.status == "verified", verdict.reason
    assert verdict.reason.startswith("the change computes exactly what the original does")
    assert "a fix whose bug this run does not show" in verdict.reason
    assert verdict.evidence["identical_to_before"] is True
    # the fix that registers the keys as a parameter trains them: a difference, proven
    parameter = MEMORY.replace(
        "self.keys = torch.randn(3, 4)", "self.keys = nn.Parameter(torch.randn(3, 4))"
    )
    verdict = verify_sources(MEMORY, parameter, timeout=60.0, intent=FixIntent.unknown())
    assert verdict.status == "verified", verdict.reason
    assert verdict.evidence["identical_to_before"] is False
    assert "computes exactly" not in verdict.reason


# A mask applied with an out-of-place op whose result is dropped: the statement does nothing.
DROPPED_MASK = """\
import torch
import torch.nn as nn

torch.manual_seed(0)
q, k = nn.Linear(4, 4), nn.Linear(4, 4)
x = torch.randn(5, 4)
mask = torch.rand(5, 5) > 0.7
attn = (q(x) @ k(x).t()).softmax(-1)
attn.masked_fill(mask, 0.0)
attn.sum(-1).pow(2).mean().backward()
"""


def test_a_result_the_original_discarded_and_the_change_uses_is_unverified() -> None:
    used = DROPPED_MASK.replace("attn.masked_fill(mask, 0.0)", "attn = attn.masked_fill(mask, 0.0)")
    verdict = verify_sources(DROPPED_MASK, used, timeout=60.0, intent=FixIntent.unknown())
    assert verdict.status == "unverified", verdict.reason
    assert "before discards the result of `attn.masked_fill(mask, 0.0)`" in verdict.reason
    # another change of the forward is still one
    other = DROPPED_MASK.replace("attn.masked_fill(mask, 0.0)", "attn = attn * 2")
    verdict = verify_sources(DROPPED_MASK, other, timeout=60.0, intent=FixIntent.unknown())
    assert verdict.status == "rejected", verdict.reason


# The heads are kept in a plain list: they get gradients, and the optimizer built from
# ``model.parameters()`` never holds them.
LISTED = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


class Heads(nn.Module):
    def __init__(self):
        super().__init__()
        self.trunk = nn.Linear(6, 4)
        self.heads = [nn.Linear(4, 1) for _ in range(2)]

    def forward(self, x):
        h = torch.tanh(self.trunk(x))
        return torch.cat([head(h) for head in self.heads], dim=1)


torch.manual_seed(0)
model = Heads()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(5, 6), torch.randn(5, 2)
for _ in range(2):
    opt.zero_grad()
    F.mse_loss(model(x), y).backward()
    opt.step()
"""


def test_a_change_that_leaves_a_parameter_untrained_as_before_is_no_proof() -> None:
    # wrapped after the optimizer was built: the run is the original's, heads untrained
    late = LISTED.replace(
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n",
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "model.heads = nn.ModuleList(model.heads)\n",
    )
    verdict = verify_sources(LISTED, late, timeout=60.0, intent=FixIntent.unknown())
    assert verdict.status == "unverified", verdict.reason
    assert verdict.reason.startswith("the change computes exactly what the original does")
    assert "get a gradient that no optimizer step reads" in verdict.reason
    assert "in both, #2 'model.heads.0.weight' (line 10), #3 'model.heads.0.bias'" in verdict.reason
    # registered before the optimizer is built: the heads train, a difference proven
    early = LISTED.replace(
        "self.heads = [nn.Linear(4, 1) for _ in range(2)]",
        "self.heads = nn.ModuleList([nn.Linear(4, 1) for _ in range(2)])",
    )
    verdict = verify_sources(LISTED, early, timeout=60.0, intent=FixIntent.unknown())
    assert verdict.status == "verified", verdict.reason


def test_a_change_that_leaves_a_nonleaf_grad_read_as_it_was_is_unverified() -> None:
    """The run still reads ``.grad`` of a non-leaf (None) at the same statement: the
    change computes what the original does, and the bug it means to fix is still there."""
    before = """\
import torch

torch.manual_seed(0)
x = torch.randn(3, requires_grad=True).double()
loss = (x ** 2).sum()
loss.backward()
print(x.grad)
"""
    wrong = before.replace(".double()\n", ".double()\nx.requires_grad_()\n")
    verdict = verify_sources(before, wrong, intent=FixIntent.unknown())
    assert verdict.status == "unverified", verdict.reason
    assert "reads `.grad` of a tensor that is not a leaf" in verdict.reason
    fixed = before.replace(
        "x = torch.randn(3, requires_grad=True).double()",
        "x = torch.randn(3).double().requires_grad_()",
    )
    verdict = verify_sources(before, fixed, intent=FixIntent.unknown())
    assert verdict.status != "rejected", verdict.reason


# A meta-learning step: the inner gradient taken without create_graph is a constant to
# the outer backward (first order); the fix is create_graph=True.
META = """\
import torch
import torch.nn.functional as F

torch.manual_seed(0)
w = torch.randn(3, 1, requires_grad=True)
meta_opt = torch.optim.SGD([w], lr=0.1)
for _ in range(2):
    x_s, y_s, x_q, y_q = torch.randn(4, 3), torch.randn(4, 1), torch.randn(4, 3), torch.randn(4, 1)
    inner = F.mse_loss(x_s @ w, y_s)
    (grad,) = torch.autograd.grad(inner, [w])
    fast = w - 0.5 * grad
    outer = F.mse_loss(x_q @ fast, y_q)
    meta_opt.zero_grad()
    outer.backward()
    meta_opt.step()
    print(round(outer.item(), 4))
"""


def test_a_change_to_a_first_order_inner_gradient_that_stays_first_order_is_unverified() -> None:
    retained = META.replace("grad(inner, [w])", "grad(inner, [w], retain_graph=True)")
    verdict = verify_sources(META, retained, timeout=60.0, intent=FixIntent.unknown())
    assert verdict.status == "unverified", verdict.reason
    assert "without `create_graph`" in verdict.reason and "line 10" in verdict.reason
    # a run longer than the calls recorded: the same run, judged on the calls recorded
    long = META.replace("range(2)", "range(30)")
    verdict = verify_sources(
        long,
        long.replace("grad(inner, [w])", "grad(inner, [w], retain_graph=True)"),
        timeout=60.0,
        intent=FixIntent.unknown(),
    )
    assert verdict.status == "unverified", verdict.reason
    assert "at each of the first 50 (those recorded) of its 60 backward call(s)" in verdict.reason


def test_a_refactor_elsewhere_of_a_first_order_program_stays_verified() -> None:
    # first-order MAML on purpose: a change that does not touch the gradient call
    renamed = META.replace("fast = w - 0.5 * grad", "fast = w - grad * 0.5")
    verdict = verify_sources(META, renamed, timeout=60.0, intent=FixIntent.unknown())
    assert verdict.status == "verified", verdict.reason


def test_the_second_order_fix_is_verified() -> None:
    fixed = META.replace("grad(inner, [w])", "grad(inner, [w], create_graph=True)")
    verdict = verify_sources(META, fixed, timeout=60.0, intent=FixIntent.unknown())
    assert verdict.status == "verified", verdict.reason


# An encoder behind `torch.round`: autograd reaches its weights with zeros only.
ROUNDED = """\
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
encoder, decoder = nn.Linear(6, 3), nn.Linear(3, 6)
opt = torch.optim.SGD([*encoder.parameters(), *decoder.parameters()], lr=0.1)
x = torch.randn(8, 6)
for _ in range(3):
    opt.zero_grad()
    code = torch.round(encoder(x) * 4) / 4
    F.mse_loss(decoder(code), x).backward()
    opt.step()
"""


def test_parameters_reached_only_by_zero_gradients_leave_a_change_unverified() -> None:
    """A change that computes exactly what the original does proves nothing while the
    encoder never trains (a hurried fix that keeps the round); with the encoder kept out
    of the optimizer on purpose it is a proven refactor."""
    pair = (
        "code = torch.round(encoder(x) * 4) / 4",
        "code = torch.round(encoder(x) * 4) * 0.25",
    )
    verdict = verify_sources(
        ROUNDED, ROUNDED.replace(*pair), timeout=60.0, intent=FixIntent.unknown()
    )
    assert verdict.status == "unverified", verdict.reason
    assert "are in an optimizer's groups and backward calls reach them, but with nothing " in (
        verdict.reason
    )
    assert "'encoder.weight'" in verdict.reason or "#0" in verdict.reason
    # the encoder kept out of the optimizer on purpose (a fixed random projection): the
    # optimizer steps only what trains, and the same change is a proven refactor
    fixed_encoder = ROUNDED.replace(
        "[*encoder.parameters(), *decoder.parameters()]", "decoder.parameters()"
    )
    verdict = verify_sources(
        fixed_encoder,
        fixed_encoder.replace(*pair),
        timeout=60.0,
        intent=FixIntent.unknown(),
    )
    assert verdict.status == "verified", verdict.reason
