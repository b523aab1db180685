"""An in-place write that other names see: the repair an "inplace operation" error asks
for (the write made out of place) changes what they read, and is verified against the
original replayed with the writes at the rewritten lines made out of place."""

from __future__ import annotations

from gradfix.verify import verify_sources
from gradfix.verify.intent import FixIntent

TIMEOUT = 60.0

# Two decoders share one input; the first adds its positional embedding into it in place.
SHARED = """\
import torch
import torch.nn as nn

torch.manual_seed(0)


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.pos = nn.Parameter(torch.randn(1, 4) * 0.1, requires_grad=False)
        self.norm = nn.LayerNorm(4)
        self.out = nn.Linear(4, 3)

    def forward(self, token):
        x = token
        x += self.pos
        return self.out(self.norm(x))


encoder = nn.Linear(5, 4)
decoder_a, decoder_b = Decoder(), Decoder()
z = encoder(torch.randn(6, 5))
loss = decoder_a(z).pow(2).mean() + decoder_b(z).pow(2).mean()
loss.backward()
"""


def test_an_in_place_add_into_a_shared_input_made_out_of_place_is_verified() -> None:
    fixed = SHARED.replace(
        "        x = token\n        x += self.pos\n", "        x = token + self.pos\n"
    )
    verdict = verify_sources(SHARED, fixed, timeout=TIMEOUT, intent=FixIntent.unknown())
    assert verdict.status == "verified", verdict.reason
    assert verdict.reason.startswith("against before with its in-place writes")
    # a change that adds the embedding twice is no out-of-place repair
    twice = fixed.replace("x = token + self.pos", "x = token + 2 * self.pos")
    verdict = verify_sources(SHARED, twice, timeout=TIMEOUT, intent=FixIntent.unknown())
    assert verdict.status == "rejected", verdict.reason


# An activation made with inplace=True overwrites the input a shortcut adds back.
SHORTCUT = """\
import torch
import torch.nn as nn

torch.manual_seed(0)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.act = nn.LeakyReLU(0.2, inplace=True)
        self.conv = nn.Linear(4, 4)

    def forward(self, x):
        return x + self.conv(self.act(x))


stem = nn.Sequential(nn.Linear(3, 4), nn.Tanh())
block = Block()
block(stem(torch.randn(5, 3))).pow(2).mean().backward()
"""


def test_an_in_place_activation_made_at_a_rewritten_line_runs_out_of_place() -> None:
    fixed = SHORTCUT.replace("inplace=True", "inplace=False")
    verdict = verify_sources(SHORTCUT, fixed, timeout=TIMEOUT, intent=FixIntent.unknown())
    assert verdict.status == "verified", verdict.reason
    assert "made out of place" in verdict.reason


# An inplace ReLU first in a residual block overwrites the block's input, which the skip
# connection then adds: no error, but the forward adds relu(input) (silent).
SKIP_READS_RELU_INPUT = """\
import torch
import torch.nn as nn


class ResBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv = nn.Sequential(
            nn.ReLU(inplace=True), nn.Linear(c, c), nn.ReLU(), nn.Linear(c, c)
        )

    def forward(self, input):
        out = self.conv(input)
        out += input
        return out


torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 6), ResBlock(6), nn.Linear(6, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(8, 4), torch.randn(8, 1)
for step in range(2):
    opt.zero_grad()
    ((model(x) - y) ** 2).mean().backward()
    opt.step()
"""


def test_a_silent_inplace_write_another_name_reads_is_judged_out_of_place() -> None:
    fixed = SKIP_READS_RELU_INPUT.replace("nn.ReLU(inplace=True), ", "nn.ReLU(), ")
    verdict = verify_sources(SKIP_READS_RELU_INPUT, fixed, intent=FixIntent.unknown())
    assert verdict.status == "verified", verdict.reason
    assert verdict.reason.startswith(
        "against before with its in-place writes at the lines the change rewrote made out "
        "of place (another name read the written tensor"
    )
    # another forward at the same line is still a forward changed
    tanh = SKIP_READS_RELU_INPUT.replace("nn.ReLU(inplace=True), ", "nn.Tanh(), ")
    verdict = verify_sources(SKIP_READS_RELU_INPUT, tanh, intent=FixIntent.unknown())
    assert verdict.status == "rejected", verdict.reason
    assert verdict.reason.startswith("forward changed"), verdict.reason


# sigmoid saves its output, which the program then doubles in place (raises).
SAVED_OUTPUT_DOUBLED = """\
import torch

torch.manual_seed(0)
w = torch.randn(3, requires_grad=True)
x = torch.randn(5, 3)
h = torch.sigmoid(x * w)
h *= 2
h.sum().backward()
"""


def test_a_stop_gradient_left_undecided_by_the_replay_does_not_undo_a_rejection() -> None:
    """``h.data *= 2`` silences the error and corrupts sigmoid's backward: rejected against
    before's finite differences; the out-of-place replay of before, against which the
    added ``.data`` is only undecided intent, does not turn that into unverified."""
    wrong = SAVED_OUTPUT_DOUBLED.replace("h *= 2", "h.data *= 2")
    verdict = verify_sources(SAVED_OUTPUT_DOUBLED, wrong, intent=FixIntent.unknown())
    assert verdict.status == "rejected", verdict.reason
    fixed = SAVED_OUTPUT_DOUBLED.replace("h *= 2", "h = h * 2")
    verdict = verify_sources(SAVED_OUTPUT_DOUBLED, fixed, intent=FixIntent.unknown())
    assert verdict.status == "verified", verdict.reason
