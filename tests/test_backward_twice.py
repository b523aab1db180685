"""GF401 backward-twice: the statements that run after a first backward call."""

from __future__ import annotations

import textwrap

import pytest

from gradfix.codemods.backward_twice import BackwardTwice
from gradfix.engine import lint_source

PRELUDE = """\
import torch
w = torch.randn(3, requires_grad=True)
h = torch.tanh(w * 2)
l1 = h.sum()
l2 = (h ** 2).sum()
"""


def _lint(body: str, fix: bool = False):
    return lint_source(PRELUDE + textwrap.dedent(body), rules=[BackwardTwice], fix=fix)


def test_call_in_a_one_line_suite_sees_the_statements_after_its_header() -> None:
    body = "if w.sum() > 0: l1.backward()\nl2.backward()\n"
    assert [f.line for f in _lint(body).findings] == [6]
    result = _lint(body, fix=True)
    assert "if w.sum() > 0: l1.backward(retain_graph=True)\nl2.backward()\n" in result.source


def test_second_call_on_the_same_line_after_a_semicolon() -> None:
    result = _lint("l1.backward(); l2.backward()\n", fix=True)
    assert result.source.endswith("l1.backward(retain_graph=True); l2.backward()\n")


def test_positional_retain_graph_false_becomes_true() -> None:
    result = _lint("l1.backward(None, False)\nl2.backward()\n", fix=True)
    assert result.source.endswith("l1.backward(None, True)\nl2.backward()\n")


def test_a_step_between_the_calls_leaves_no_fix() -> None:
    findings = _lint("l1.backward()\nw.add_(1)\nl2.backward()\n").findings
    assert [(f.line, f.fix) for f in findings] == [(6, None)]


STALE = """\
import torch
w = torch.randn(3, requires_grad=True)
y = torch.exp(w)
for step in range(3):
    loss = (y * w).sum()
    loss.backward()
"""


def _moved(source: str) -> str | None:
    """The source after GF401's fixes (unsafe ones too), None when nothing was fixed."""
    result = lint_source(source, rules=[BackwardTwice], fix=True, unsafe_fixes=True)
    return None if result.source == source else result.source


def test_a_graph_built_before_the_loop_is_reported_where_it_is_built() -> None:
    findings = lint_source(STALE, rules=[BackwardTwice]).findings
    assert [f.line for f in findings] == [3]
    assert findings[0].fix is not None and findings[0].fix.safety == "unsafe"


def test_the_forward_built_before_the_loop_moves_into_it() -> None:
    assert _moved(STALE) == STALE.replace(
        "y = torch.exp(w)\nfor step in range(3):\n",
        "for step in range(3):\n    y = torch.exp(w)\n",
    )


LAID_OUT = """\
import torch
w = torch.randn(3, requires_grad=True)

# forward
h = torch.tanh(w)  # once
loss = h.pow(2).sum()

# train
for step in range(3):
    # update
    w.grad = None
    loss.backward()
    w.data -= 0.1 * w.grad
"""


def test_the_moved_lines_keep_their_comments_and_the_loop_its_own() -> None:
    assert _moved(LAID_OUT) == (
        "import torch\n"
        "w = torch.randn(3, requires_grad=True)\n"
        "\n"
        "# train\n"
        "for step in range(3):\n"
        "    # forward\n"
        "    h = torch.tanh(w)  # once\n"
        "    loss = h.pow(2).sum()\n"
        "\n"
        "    # update\n"
        "    w.grad = None\n"
        "    loss.backward()\n"
        "    w.data -= 0.1 * w.grad\n"
    )
    assert _moved(_moved(LAID_OUT) or "") is None  # idempotent


def test_a_derived_value_that_saves_nothing_moves_with_the_forward() -> None:
    source = STALE.replace("y = torch.exp(w)", "s = w + 1\ny = torch.exp(s)")
    assert _moved(source) == source.replace(
        "s = w + 1\ny = torch.exp(s)\nfor step in range(3):\n",
        "for step in range(3):\n    s = w + 1\n    y = torch.exp(s)\n",
    )


@pytest.mark.parametrize(
    "forward",
    [
        "lin = torch.nn.Linear(3, 3)\ny = lin(w)",  # a layer of torch
        "y = torch.exp(w).view(w.size(0), -1)",  # a question to the tensor
        "y = torch.exp(w) / len(w)",  # a builtin that changes nothing
    ],
)
def test_a_forward_of_pure_calls_moves(forward: str) -> None:
    assert _moved(STALE.replace("y = torch.exp(w)", forward)) is not None


@pytest.mark.parametrize(
    ("before", "after"),
    [
        # a random draw: evaluated in each iteration it changes every later draw
        ("y = torch.exp(w)", "y = torch.exp(w) + torch.randn(3)"),
        ("y = torch.exp(w)", "drop = torch.nn.Dropout(0.5)\ny = drop(torch.exp(w))"),
        ("y = torch.exp(w)", "y = torch.nn.functional.dropout(torch.exp(w))"),
        # effects: a print, a function of the project, an in-place change
        ("y = torch.exp(w)", "y = torch.exp(w)\nz = print(y)"),
        ("y = torch.exp(w)", "y = helper(torch.exp(w))"),
        ("y = torch.exp(w)", "len = print\ny = torch.exp(w) / len(w)"),  # shadowed
        ("y = torch.exp(w)", "y = torch.exp(w).clamp_(0, 1)"),
        # a graph made before the moved lines, not next to them, would stay stale
        ("y = torch.exp(w)", "s = w + 1\nn = 3\ny = torch.exp(s)"),
        # read after a loop that may not run: the name would be unbound
        ("for step in range(3):", "for step in range(n):"),
        ("for step in range(3):", "while w.sum() > 0:"),
    ],
)
def test_a_forward_the_loop_cannot_evaluate_again_unchanged_stays(before: str, after: str) -> None:
    source = "n = 3\n" + STALE.replace(before, after) + "print(y)\n"
    assert lint_source(source, rules=[BackwardTwice]).findings  # still reported
    assert _moved(source) is None


def test_a_name_read_after_a_loop_that_runs_may_move() -> None:
    assert _moved(STALE + "print(y)\n") is not None


def test_a_loop_that_backpropagates_once_and_leaves_is_not_reported() -> None:
    source = STALE + "    break\n"
    assert lint_source(source, rules=[BackwardTwice]).findings == []


CARRIED = """\
import torch
cell = torch.nn.RNNCell(2, 3)
h = torch.zeros(1, 3)
for x in torch.rand(4, 1, 2):
    h = cell(x, h)  # the state
    h.sum().backward()
"""


def test_state_carried_into_the_next_backward_is_detached_after_the_step() -> None:
    assert [f.line for f in lint_source(CARRIED, rules=[BackwardTwice]).findings] == [5]
    result = lint_source(CARRIED, rules=[BackwardTwice], fix=True)
    assert "    h = cell(x, h)  # the state\n    h = h.detach()\n" in result.source


def test_state_reset_in_each_iteration_is_not_carried() -> None:
    source = CARRIED.replace("    h = cell", "    h = torch.zeros(1, 3)\n    h = cell")
    assert lint_source(source, rules=[BackwardTwice]).findings == []


@pytest.mark.parametrize(
    "rebinding",
    [
        "x = wrap(x)",  # the loop's own target, bound anew each iteration
        "model = model.to('cpu')",  # a module, not a state
        "w2 = w2.to('cpu')",  # a move of the tensor itself
    ],
)
def test_names_rebound_from_themselves_that_carry_no_graph(rebinding: str) -> None:
    source = f"""\
import torch
from helpers import wrap
model = torch.nn.Linear(2, 1)
w2 = torch.ones(1, requires_grad=True)
x = torch.zeros(2)
for x in torch.rand(3, 2):
    {rebinding}
    (model(x) * w2).sum().backward()
"""
    assert lint_source(source, rules=[BackwardTwice]).findings == []


RECURRENT = """\
import torch
from torch import nn
rnn = nn.{layer}(2, 3, batch_first=True)
state = None
for x in torch.rand(4, 1, 5, 2):
    out, state = rnn(x, state)
    out.sum().backward()
"""


def test_the_state_of_a_gru_is_a_tensor_and_is_detached() -> None:
    source = RECURRENT.format(layer="GRU")
    fixed = lint_source(source, rules=[BackwardTwice], fix=True).source
    assert "    out, state = rnn(x, state)\n    state = state.detach()\n" in fixed


def test_the_state_of_an_lstm_is_a_tuple_and_is_reported_without_a_fix() -> None:
    findings = lint_source(RECURRENT.format(layer="LSTM"), rules=[BackwardTwice]).findings
    assert [(f.line, f.fix) for f in findings] == [(6, None)]


STATEFUL = """\
import torch
from torch import nn


class Memory(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(2, 2)
        self.total = torch.zeros(2)

    def forward(self, x):
        out = self.proj(x)
        self.total = {update}
        return out.sum() + self.total.sum()


model = Memory()
for x in torch.rand(3, 2):
    loss = model(x)
    loss.backward(retain_graph=True)
"""


def test_retain_graph_hiding_state_a_model_carries_is_reported() -> None:
    source = STATEFUL.format(update="self.total + out.mean(0)")
    findings = lint_source(source, rules=[BackwardTwice]).findings
    assert [(f.line, f.fix) for f in findings] == [(20, None)]
    assert "self.total" in findings[0].message


@pytest.mark.parametrize("update", ["self.total + out.mean(0).detach()", "out.mean(0)"])
def test_retain_graph_without_carried_state_is_not_reported(update: str) -> None:
    source = STATEFUL.format(update=update)
    assert lint_source(source, rules=[BackwardTwice]).findings == []


GAN = """\
import torch
from torch import nn
netG, netD = nn.Linear(2, 4), nn.Linear(4, 1)
optD = torch.optim.Adam(netD.parameters())
optG = torch.optim.Adam(netG.parameters())
for noise in torch.randn(3, 8, 2):
    fake = netG(noise)
    errD = netD(fake).mean()
    errD.backward()
    optD.step()
    netG.zero_grad()
    errG = -netD(fake).mean()
    errG.backward()
    optG.step()
"""


def test_the_discriminator_reads_the_generators_output_detached() -> None:
    findings = lint_source(GAN, rules=[BackwardTwice]).findings
    assert [(f.line, f.fix and f.fix.safety) for f in findings] == [(8, "unsafe")]
    assert _moved(GAN) == GAN.replace("errD = netD(fake)", "errD = netD(fake.detach())")


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ("netG.zero_grad()", "optG.zero_grad()"),  # the optimizer over its parameters
        ("netG.zero_grad()", "optD.zero_grad()\n    netG.zero_grad()"),
    ],
)
def test_the_generators_gradients_reset_in_other_spellings(before: str, after: str) -> None:
    assert _moved(GAN.replace(before, after)) is not None


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ("    netG.zero_grad()\n", ""),  # kept: the generator's step reads them
        ("    optD.step()\n", "    optD.step()\n    optG.step()\n"),  # stepped first
        ("optD = torch.optim.Adam(netD.parameters())", "optD = torch.optim.Adam(params)"),
        ("netG.zero_grad()", "optD.zero_grad()"),  # not the generator's
        ("fake = netG(noise)", "fake = netG(noise * netD.weight[0, :2])"),  # D's graph too
        (
            "netD(fake).mean()\n    errD.backward",
            "netD(fake).mean() + fake.var()\n    errD.backward",
        ),
    ],
)
def test_no_detach_where_the_first_losss_gradients_may_be_used(before: str, after: str) -> None:
    source = "params = []\n" + GAN.replace(before, after)
    assert lint_source(source, rules=[BackwardTwice]).findings
    assert _moved(source) is None


def test_retain_variables_of_torch_before_1_5_is_named_for_what_it_raises() -> None:
    """Not "pass retain_graph=True" on a call that passes it under its old name: the call
    raises a TypeError first; the fix renames the argument, its value kept."""
    body = "l1.backward(retain_variables=True)\nl2.backward()\n"
    [finding] = _lint(body).findings
    assert finding.message == (
        "`retain_variables` was renamed `retain_graph` in torch 1.5: this call raises "
        "TypeError: backward() got an unexpected keyword argument 'retain_variables'"
    )
    result = _lint(body, fix=True)
    assert result.source.endswith("l1.backward(retain_graph=True)\nl2.backward()\n")
    assert result.remaining == []
    torch = pytest.importorskip("torch")  # what the message quotes is what torch says
    w = torch.ones(2, requires_grad=True)
    with pytest.raises(TypeError, match="unexpected keyword argument 'retain_variables'"):
        (w * w).sum().backward(retain_variables=True)
