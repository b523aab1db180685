"""A hand-made change that makes a graph-free tensor require grad: an input of its own
(a detached clone the program trains, an embedding output a reentrant checkpoint needs)
is compared with after's own finite differences, while a cut (a tensor detached from
the graph and made a leaf whose gradient goes nowhere) stays rejected. A stop-gradient
the program's own helper makes in place (``detach_()``) is held by finite differences."""

from __future__ import annotations

from gradfix.verify import verify_sources
from gradfix.verify.intent import FixIntent

TIMEOUT = 60.0

# learn2learn's detach_module: the clone's parameters are detached in place and lose
# requires_grad, so the clone gets no gradient.
CLONE = """\
import torch
import torch.nn as nn

torch.manual_seed(0)


def detach_module(module):
    for key in module._parameters:
        if module._parameters[key] is not None:
            module._parameters[key].detach_()


def clone_module(module):
    clone = module.__new__(type(module))
    clone.__dict__ = module.__dict__.copy()
    clone._parameters = {k: p.clone() for k, p in module._parameters.items()}
    return clone


net = nn.Linear(5, 2)
clone = clone_module(net)
detach_module(clone)
loss = (clone(torch.randn(4, 5)) ** 2).mean()
loss.backward()
print(clone.weight.grad)
"""
# the library's fix, made the helper's default here (so the line calling it stays: a
# stop-gradient a changed line calls, even inside a helper, is one finite differences
# follow, as the cut a fix removes)
KEPT = CLONE.replace(
    "def detach_module(module):", "def detach_module(module, keep_requires_grad=True):"
).replace(
    "            module._parameters[key].detach_()\n",
    "            module._parameters[key].detach_()\n"
    "            if keep_requires_grad:\n"
    "                module._parameters[key].requires_grad_()\n",
)


def test_a_detached_clone_made_to_require_grad_and_read_is_an_input() -> None:
    verdict = verify_sources(CLONE, KEPT, timeout=TIMEOUT, intent=FixIntent.unknown())
    assert verdict.status == "verified", verdict.reason
    assert verdict.evidence["new_inputs"] == [2, 3]  # clone.weight, clone.bias
    assert verdict.evidence["fd_used"]


def test_a_detached_copy_made_a_leaf_nobody_reads_is_still_a_cut() -> None:
    """The same ``requires_grad_()``, on a detached copy of a value the network computes,
    whose gradient nothing reads and which reaches no leaf before gave none: a cut."""
    model = """\
import torch
import torch.nn as nn

torch.manual_seed(0)
net = nn.Linear(5, 2)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
for step in range(2):
    out = net(torch.randn(4, 5))
    logits = out.clone()
    loss = logits.logsumexp(-1).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""
    cut = model.replace("logits = out.clone()", "logits = out.clone().detach().requires_grad_()")
    verdict = verify_sources(model, cut, timeout=TIMEOUT, intent=FixIntent.unknown())
    assert verdict.status == "rejected", verdict.reason


# A frozen embedding feeding a reentrant checkpoint: no input of the checkpointed layer
# requires grad, so the adapter inside it gets no gradient (FastChat's LoRA training).
CHECKPOINTED = """\
import warnings

import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

warnings.filterwarnings("ignore")
torch.manual_seed(0)


class Adapted(nn.Module):
    def __init__(self):
        super().__init__()
        self.base = nn.Linear(8, 8)
        self.adapter = nn.Parameter(torch.randn(8, 8) * 0.1)

    def forward(self, h):
        return torch.tanh(self.base(h) + h @ self.adapter)


embed = nn.Embedding(20, 8)
layer = Adapted()
head = nn.Linear(8, 1)
for p in [*embed.parameters(), *layer.base.parameters(), *head.parameters()]:
    p.requires_grad_(False)
opt = torch.optim.SGD([layer.adapter], lr=0.1)
ids = torch.randint(0, 20, (3, 4))
h = embed(ids)
out = checkpoint(layer, h, use_reentrant=True)
loss = head(out).pow(2).mean()
opt.zero_grad()
loss.backward()
opt.step()
print(layer.adapter.grad)
"""


def test_an_embedding_output_made_to_require_grad_for_a_checkpoint_is_an_input() -> None:
    fixed = CHECKPOINTED.replace("h = embed(ids)\n", "h = embed(ids)\nh.requires_grad_(True)\n")
    verdict = verify_sources(CHECKPOINTED, fixed, timeout=TIMEOUT, intent=FixIntent.unknown())
    assert verdict.status == "verified", verdict.reason
    assert "'layer.adapter'" in verdict.reason
    assert len(verdict.evidence["new_inputs"]) == 1


# flashtorch's saliency maps: the input's gradient is taken by a backward hook on the
# first layer, which gets None while the image does not require grad.
SALIENCY = """\
import torch
import torch.nn as nn

torch.manual_seed(0)


class Backprop:
    def __init__(self, model):
        self.model = model
        self.gradients = None
        first = model[0]
        first.register_full_backward_hook(self._record)

    def _record(self, module, grad_in, grad_out):
        self.gradients = grad_in[0]

    def calculate_gradients(self, input_, target):
        self.model.zero_grad()
        output = self.model(input_)
        output[0, target].backward()
        return self.gradients


model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
saliency = Backprop(model).calculate_gradients(torch.randn(1, 6), 1)
print(saliency)
"""
SALIENCY_FIXED = SALIENCY.replace(
    "        output = self.model(input_)\n",
    "        input_.requires_grad = True\n        output = self.model(input_)\n",
)
# the graph's own value detached and made a leaf: a cut, though every leaf before gave a
# gradient still gets one
ADJACENCY = """\
import torch
import torch.nn as nn

torch.manual_seed(0)
theta, gc = nn.Linear(4, 4), nn.Linear(4, 2)
inp = torch.randn(5, 4)
adj = torch.softmax(theta(inp) @ inp.t(), dim=-1).detach()
loss = gc(adj @ inp).pow(2).sum()
loss.backward()
print(round(loss.item(), 4), theta.weight.grad)
"""
ADJACENCY_LEAF = ADJACENCY.replace(".detach()\n", ".detach().requires_grad_()\n")


def test_an_input_made_to_require_grad_whose_gradient_a_hook_reads_is_an_input() -> None:
    verdict = verify_sources(SALIENCY, SALIENCY_FIXED, timeout=TIMEOUT, intent=FixIntent.unknown())
    assert verdict.status == "verified", verdict.reason
    assert verdict.evidence["new_inputs"] == [4]  # the image, past the two layers' leaves


def test_a_detached_graph_value_made_a_leaf_stays_a_cut() -> None:
    verdict = verify_sources(ADJACENCY, ADJACENCY_LEAF, timeout=TIMEOUT, intent=FixIntent.unknown())
    assert verdict.status == "rejected", verdict.reason
    assert "leaf tensor(s) that require grad" in verdict.reason
