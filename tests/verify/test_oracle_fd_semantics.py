"""Finite differences that differentiate what autograd does, and what each optimizer step
reads: an ``autograd.grad`` result handed back in a replay counts the same leaf uses as
the run it replays; a parameter made over an old leaf's storage is that leaf's
replacement; a ``.detach()`` both versions keep is held constant; accumulation within one
step is no stale gradient, and a term every step of the original applies that the change
resets unread is a dropped term."""

from __future__ import annotations

from gradfix.verify import verify_sources
from gradfix.verify.intent import FixIntent

TIMEOUT = 60.0

# Per-loss gradient norms weight the losses (a PINN's NTK weighting); the original reads
# them from `.grad` after a backward per loss, which leaves them summed into the step.
WEIGHTING = """\
import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(2, 8), nn.Tanh(), nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
xb, xi = torch.rand(6, 2), torch.rand(10, 2)
for _ in range(2):
    opt.zero_grad()
    losses = [nn.functional.mse_loss(model(xb), torch.zeros(6, 1)),
              nn.functional.mse_loss(model(xi), torch.sin(xi.sum(1, keepdim=True)))]
    norms = []
    for loss in losses:
        loss.backward(retain_graph=True)
        norms.append(torch.cat([p.grad.flatten() for p in model.parameters()]).norm())
    weights = [n / sum(norms) for n in norms]
    sum(w * l for w, l in zip(weights, losses)).backward()
    opt.step()
"""


def test_a_replayed_autograd_grad_counts_the_same_leaf_uses() -> None:
    fixed = WEIGHTING.replace(
        "        loss.backward(retain_graph=True)\n"
        "        norms.append(torch.cat([p.grad.flatten() for p in model.parameters()]).norm())\n",
        "        grads = torch.autograd.grad(loss, list(model.parameters()), retain_graph=True)\n"
        "        norms.append(torch.cat([g.flatten() for g in grads]).norm())\n",
    )
    assert fixed != WEIGHTING
    verdict = verify_sources(WEIGHTING, fixed, timeout=TIMEOUT, intent=FixIntent.unknown())
    assert verdict.status == "verified", verdict.reason


# A detection head's bias initialised through a view of the leaf (raises), then wrapped
# again as a new Parameter over the same storage.
REWRAP = """\
import torch
import torch.nn as nn

torch.manual_seed(0)
conv = nn.Conv2d(2, 6, 1)
b = conv.bias.view(2, -1)
b[:, 0] += 1.0
conv.bias = nn.Parameter(b.view(-1))
x = torch.randn(2, 2, 3, 3)
conv(x).pow(2).mean().backward()
"""


def test_a_parameter_made_over_an_old_leaf_s_storage_replaces_it() -> None:
    fixed = REWRAP.replace("b[:, 0] += 1.0", "b.data[:, 0] += 1.0")
    verdict = verify_sources(REWRAP, fixed, timeout=TIMEOUT, intent=FixIntent.unknown())
    assert verdict.status == "verified", verdict.reason
    # the parameter made over the old bias's storage is compared in its place
    assert "#1 'conv.bias' (line 8)" in verdict.reason
    assert any("a parameter made over its storage" in note for note in verdict.evidence["notes"])


# A regression target made from the prediction's detached values: a constant to autograd.
TARGET = """\
import torch
import torch.nn as nn

torch.manual_seed(0)
net = nn.Linear(3, 3)
net.weight.normal_(0.0, 0.5)
x = torch.randn(6, 3)
pred = net(x)
target = pred.detach() * 0.5 + torch.randn(6, 3)
((pred - target) ** 2).mean().backward()
"""


def test_finite_differences_hold_a_detach_both_versions_keep_constant() -> None:
    fixed = TARGET.replace("net.weight.normal_(0.0, 0.5)", "nn.init.normal_(net.weight, 0.0, 0.5)")
    verdict = verify_sources(TARGET, fixed, timeout=TIMEOUT, intent=FixIntent.unknown())
    assert verdict.status == "verified", verdict.reason
    # a detach the change writes is followed: the gradient it cuts is seen
    cut = fixed.replace(
        "((pred - target) ** 2).mean().backward()",
        "((pred.detach() - target) ** 2 + pred * 0).mean().backward()",
    )
    verdict = verify_sources(TARGET, cut, timeout=TIMEOUT, intent=FixIntent.unknown())
    assert verdict.status == "rejected", verdict.reason


# A GAN step that never resets the discriminator's gradients.
GAN = """\
import torch
import torch.nn as nn

torch.manual_seed(0)
netG = nn.Sequential(nn.Linear(4, 6), nn.Tanh())
netD = nn.Sequential(nn.Linear(6, 1), nn.Sigmoid())
optG = torch.optim.Adam(netG.parameters(), lr=0.01)
optD = torch.optim.SGD(netD.parameters(), lr=0.05)
bce = nn.BCELoss()
real = torch.rand(8, 6)
for _ in range(3):
    bce(netD(real).view(-1), torch.ones(8)).backward()
    fake = netG(torch.randn(8, 4))
    bce(netD(fake.detach()).view(-1), torch.zeros(8)).backward()
    optD.step()
    netG.zero_grad()
    bce(netD(fake).view(-1), torch.ones(8)).backward()
    optG.step()
"""


def test_a_reset_between_two_terms_of_a_step_drops_one() -> None:
    first = "    bce(netD(real).view(-1), torch.ones(8)).backward()\n"
    fixed = GAN.replace(first, "    netD.zero_grad()\n" + first)
    verdict = verify_sources(GAN, fixed, timeout=TIMEOUT, intent=FixIntent.unknown())
    assert verdict.status == "verified", verdict.reason
    between = GAN.replace(first, first + "    netD.zero_grad()\n")
    verdict = verify_sources(GAN, between, timeout=TIMEOUT, intent=FixIntent.unknown())
    assert verdict.status == "rejected", verdict.reason
    assert "a term of the leaf's objective dropped" in verdict.reason


# A custom Function that computes its forward on detached values: its backward, not
# autograd, differentiates them, so a perturbed run must see them move (in float64 too:
# float32 cannot tell a gradient times 1.002 from one without).
DETACHED_FORWARD = """\
import torch

torch.manual_seed(0)


class Total(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.detach().exp().sum()

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return x.detach().exp()


w = torch.randn(4, requires_grad=True)
(1.002 * Total.apply(w)).backward()
"""


def test_a_detach_inside_a_function_s_forward_is_followed() -> None:
    fixed = DETACHED_FORWARD.replace(
        "return x.detach().exp()\n", "return x.detach().exp() * grad_output\n"
    )
    verdict = verify_sources(DETACHED_FORWARD, fixed, timeout=TIMEOUT, intent=FixIntent.unknown())
    assert verdict.status == "verified", verdict.reason


# A manual SGD update written in place on the parameters (raises after the first backward).
MANUAL_STEP = """\
import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Linear(3, 2)
x, y = torch.randn(8, 3), torch.randn(8, 2)
for _ in range(3):
    model.zero_grad()
    ((model(x) - y) ** 2).mean().backward()
    for p in model.parameters():
        p.add_(-0.1 * p.grad)
"""


def test_an_update_lost_to_a_rebound_loop_variable_is_rejected() -> None:
    data = MANUAL_STEP.replace("p.add_(-0.1 * p.grad)", "p.data.add_(-0.1 * p.grad)")
    verdict = verify_sources(MANUAL_STEP, data, timeout=TIMEOUT, intent=FixIntent.unknown())
    assert verdict.status == "verified", verdict.reason
    rebound = MANUAL_STEP.replace("p.add_(-0.1 * p.grad)", "p = p - 0.1 * p.grad")
    verdict = verify_sources(MANUAL_STEP, rebound, timeout=TIMEOUT, intent=FixIntent.unknown())
    assert verdict.status == "rejected", verdict.reason
    assert "the update is lost" in verdict.reason


# A calculator that caches tensors computed from the first call's cell (still attached to
# its graph) and hands them to a later call with an equal cell: backward through a freed
# graph. Its detached copy of the cell decides the reuse.
CACHE = """\
import torch
import torch.nn as nn

torch.manual_seed(0)


class Calculator(nn.Module):
    def __init__(self):
        super().__init__()
        self._cell_cache = None
        self._kvectors = None

    def forward(self, positions, cell):
        if self._cell_cache is None or not torch.equal(self._cell_cache, cell):
            self._kvectors = torch.linalg.inv(cell).t() * 6.28
            self._cell_cache = cell.detach().clone()
        return (positions @ self._kvectors).cos().sum() + cell.diagonal().prod()


calc = Calculator()
for _ in range(2):
    positions = torch.rand(4, 3).requires_grad_(True)
    cell = (3 * torch.eye(3)).requires_grad_(True)
    calc(positions, cell).backward()
"""


def test_a_recomputation_that_stops_reusing_a_freed_graph_is_verified() -> None:
    fixed = CACHE.replace(
        "not torch.equal(self._cell_cache, cell):",
        "not torch.equal(self._cell_cache, cell) or cell.requires_grad:",
    )
    verdict = verify_sources(CACHE, fixed, timeout=TIMEOUT, intent=FixIntent.unknown())
    assert verdict.status == "verified", verdict.reason
    retained = CACHE.replace(
        "calc(positions, cell).backward()", "calc(positions, cell).backward(retain_graph=True)"
    )
    verdict = verify_sources(CACHE, retained, timeout=TIMEOUT, intent=FixIntent.unknown())
    assert verdict.status == "rejected", verdict.reason


# A library turns autograd off for the whole program on import; its training turns it on
# for itself, and the user's own model then backpropagates a loss that does not require
# grad ("element 0 of tensors does not require grad").
GRAD_OFF_ON_IMPORT = """\
import torch

torch.set_grad_enabled(False)
torch.manual_seed(0)
w = torch.randn(3, requires_grad=True)
x = torch.randn(5, 3)
with torch.enable_grad():
    (x @ w).pow(2).mean().backward()
w.grad = None
h = torch.tanh(x @ w)
(h.sum() * w.sum()).backward()
"""


def test_reads_under_a_grad_off_mode_the_change_removed_are_followed() -> None:
    """Before's finite differences (its second backward raised, so they are the reference)
    follow the reads made while autograd is off by the statement the change removed; held,
    as under a ``no_grad`` both versions keep, they would make the gradient zero."""
    fixed = GRAD_OFF_ON_IMPORT.replace("torch.set_grad_enabled(False)\n", "")
    verdict = verify_sources(GRAD_OFF_ON_IMPORT, fixed, intent=FixIntent.unknown())
    assert verdict.status == "verified", verdict.reason


def test_a_model_read_only_under_the_removed_grad_off_mode_is_followed() -> None:
    """No read of the weights happens with autograd on in before (the whole program runs
    under the mode the change removed): those reads are the uses finite differences
    perturb, else before's derivative would be zero and the fix's gradient 'wrong'."""
    before = """\
import torch
import torch.nn as nn

torch.set_grad_enabled(False)
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 3), nn.Tanh(), nn.Linear(3, 1))
loss = model(torch.randn(6, 4)).pow(2).mean()
loss.backward()
"""
    fixed = before.replace("torch.set_grad_enabled(False)\n", "")
    verdict = verify_sources(before, fixed, intent=FixIntent.unknown())
    assert verdict.status == "verified", verdict.reason


# A sign binarizer whose backward returns one value for two inputs: backward raises.
BINARIZER = """\
import torch
import torch.nn as nn

torch.manual_seed(0)


class Sign(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, training):
        return x.sign()

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output


encoder = nn.Linear(6, 4)
decoder = nn.Linear(4, 6)
x = torch.randn(5, 6)
code = Sign.apply(torch.tanh(encoder(x)), True)
loss = (decoder(code) - x).pow(2).mean()
loss.backward()
"""


def test_no_gradient_through_a_flat_custom_function_is_no_proof() -> None:
    """A backward that returns None for the input too makes the error go away and agrees
    with finite differences (sign is flat), yet a straight-through gradient was as
    likely meant: unverified, naming the leaves left without gradient."""
    dropped = BINARIZER.replace("return grad_output\n", "return None, None\n")
    verdict = verify_sources(BINARIZER, dropped, intent=FixIntent.unknown())
    assert verdict.status == "unverified", verdict.reason
    assert "no gradient where before raised" in verdict.reason
    assert "'encoder.weight'" in verdict.reason


def test_a_data_read_the_change_removes_is_followed() -> None:
    """A custom layer reads ``weight.data`` in its forward (the weight gets no gradient);
    the fix reads the weight. Finite differences of before follow the `.data` read at
    the line the change rewrote, as they follow a `.detach()` there, so before's
    derivative is the forward's, and the fix's gradient equals it."""
    before = """\
import torch
import torch.nn as nn

torch.manual_seed(0)


class MyLinear(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(4, 3))

    def forward(self, x):
        return torch.tanh(x @ self.weight.data)


layer = MyLinear()
x = torch.randn(5, 4, requires_grad=True)
layer(x).pow(2).sum().backward()
"""
    fixed = before.replace("x @ self.weight.data", "x @ self.weight")
    verdict = verify_sources(before, fixed, intent=FixIntent.unknown())
    assert verdict.status == "verified", verdict.reason


# Truncated BPTT over chunks with one optimizer step per sequence: the state carried into
# the next chunk went through the previous backward call. The fix detaches it there (a
# changed line); finite differences hold that detach, since differentiating through a
# graph already backpropagated is what no program without retain_graph means.
CHUNKS = """\
import torch
import torch.nn as nn

torch.manual_seed(0)
cell = nn.RNNCell(3, 4)
head = nn.Linear(4, 1)
opt = torch.optim.SGD(list(cell.parameters()) + list(head.parameters()), lr=0.1)
xs, ys = torch.randn(6, 2, 3), torch.randn(6, 2, 1)
h = torch.zeros(2, 4)
opt.zero_grad()
for start in range(0, 6, 2):
    loss = 0.0
    for t in range(start, start + 2):
        h = cell(xs[t], h)
        loss = loss + ((head(h) - ys[t]) ** 2).mean()
    loss.backward()
    h.detach_()
opt.step()
print(round(loss.item(), 4))
"""


def test_finite_differences_hold_a_detach_of_state_an_earlier_backward_went_through() -> None:
    # before fails the way OpenNMT's decoder state did: the state is a view of the
    # cell's output, which cannot be detached in place
    before = CHUNKS.replace("        h = cell(xs[t], h)\n", "        h = cell(xs[t], h)[:]\n")
    fixed = before.replace("    h.detach_()\n", "    h = h.detach()\n")
    verdict = verify_sources(before, fixed, timeout=TIMEOUT, intent=FixIntent.unknown())
    assert verdict.status == "verified", verdict.reason
    assert "the fix's own finite differences over 2 backward call(s)" in verdict.reason


# A gradient reversal layer written as an nn.Module with a `backward` method autograd never
# calls (an identity); the fix makes it an autograd.Function. The gradients it declares are
# no derivative of the forward: finite differences can neither prove nor disprove them.
REVERSAL = """\
import torch
import torch.nn as nn

torch.manual_seed(0)


class GradientReversal(nn.Module):
    def forward(self, x):
        return x

    def backward(self, grad_output):
        return -grad_output


encoder, task, domain = nn.Linear(4, 3), nn.Linear(3, 2), nn.Linear(3, 2)
x, y, d = torch.randn(5, 4), torch.randint(0, 2, (5,)), torch.randint(0, 2, (5,))
features = encoder(x)
loss = nn.functional.cross_entropy(task(features), y) + nn.functional.cross_entropy(
    domain(GradientReversal()(features)), d
)
loss.backward()
print(round(loss.item(), 4))
"""
REVERSAL_FIXED = REVERSAL.replace(
    """class GradientReversal(nn.Module):
    def forward(self, x):
        return x

    def backward(self, grad_output):""",
    """class GradientReversal(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad_output):""",
).replace("GradientReversal()(features)", "GradientReversal.apply(features)")


def test_a_gradient_the_change_declares_with_its_own_function_is_unverified() -> None:
    verdict = verify_sources(REVERSAL, REVERSAL_FIXED, timeout=TIMEOUT, intent=FixIntent.unknown())
    assert verdict.status == "unverified", verdict.reason
    assert "GradientReversal.apply, which before does not have" in verdict.reason


# The Annotated Transformer's chunked loss: each chunk of the encoder's output is cut off
# as a leaf, its loss backpropagated alone, and the chunks' gradients sent through the
# encoder at once with `out.backward(gradient=...)`. The bug took `.item()` of each chunk's
# loss (no graph: backward raises).
CHUNKED = """\
import torch
import torch.nn as nn

torch.manual_seed(0)
encoder = nn.Sequential(nn.Linear(4, 6), nn.Tanh())
head = nn.Linear(6, 3)
opt = torch.optim.SGD(list(encoder.parameters()) + list(head.parameters()), lr=0.1)
x, y = torch.randn(5, 4), torch.randint(0, 3, (5, 2))
for step in range(2):
    out = torch.stack([encoder(x), encoder(x * 0.5)], dim=1)
    grads = []
    for i in range(2):
        column = out[:, i].detach()CLONE.requires_grad_()
        loss = nn.functional.cross_entropy(head(column), y[:, i])
        l = loss.item() / torch.tensor(2.0)
        l.backward()
        grads.append(column.grad.clone())
    out.backward(gradient=torch.stack(grads, dim=1))
    opt.step()
    opt.zero_grad()
"""


def test_finite_differences_hold_the_gradient_a_backward_call_is_given() -> None:
    before = CHUNKED.replace("CLONE", ".clone()")
    fixed = before.replace("loss.item() / torch", "loss / torch")
    verdict = verify_sources(before, fixed, timeout=TIMEOUT, intent=FixIntent.unknown())
    assert verdict.status == "verified", verdict.reason


def test_a_leaf_sharing_a_cut_values_storage_is_not_judged_where_it_gets_nothing() -> None:
    before = CHUNKED.replace("CLONE", "")
    fixed = before.replace("loss.item() / torch", "loss / torch")
    verdict = verify_sources(before, fixed, timeout=TIMEOUT, intent=FixIntent.unknown())
    assert verdict.status == "verified", verdict.reason


# A weight initialised by an index assignment: on the parameter itself it raises (a leaf
# that requires grad used in an in-place operation); the fix writes through `.data`. That
# access replaces values, it reads none: no use finite differences perturb there.
INIT_WRITE = """\
import torch
import torch.nn as nn

torch.manual_seed(0)
m = nn.Linear(3, 3)
m.weight[0, 0] = 0.5
x, y = torch.randn(6, 3), torch.randn(6, 3)
opt = torch.optim.SGD(m.parameters(), lr=0.1)
for step in range(2):
    opt.zero_grad()
    ((m(x) - y) ** 2).mean().backward()
    opt.step()
"""


def test_a_write_through_data_at_a_changed_line_is_no_use() -> None:
    fixed = INIT_WRITE.replace("m.weight[0, 0] = 0.5", "m.weight.data[0, 0] = 0.5")
    verdict = verify_sources(INIT_WRITE, fixed, timeout=TIMEOUT, intent=FixIntent.unknown())
    assert verdict.status == "verified", verdict.reason
