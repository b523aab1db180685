"""GF403 loss-accumulation: which uses of the running total only log it."""

from __future__ import annotations

import textwrap

import pytest

from gradfix.codemods.leaf_inplace import LeafInplace
from gradfix.codemods.loss_accumulation import LossAccumulation
from gradfix.engine import lint_source

LOOP = """\
import torch
model = torch.nn.Linear(3, 1)
total = 0
for x in torch.rand(4, 2, 3):
    loss = model(x).sum()
    loss.backward()
    total += loss
"""


def _lines(after_loop: str) -> list[int]:
    source = LOOP + textwrap.dedent(after_loop)
    return [f.line for f in lint_source(source, rules=[LossAccumulation]).findings]


@pytest.mark.parametrize(
    "logged",
    [
        "print(total)\n",
        "print('loss', total, sep=total)\n",  # a keyword argument of a logging call
        "print(*total)\n",
        "print('%.3f' % total)\n",
        "if total > 3:\n    pass\n",
        "avg = total / 4\nprint(f'{avg:.3f}')\n",
        "total = 0\n",
        "def f(total):\n    return total\n",  # a parameter: another variable of that name
    ],
)
def test_logged_totals_are_reported(logged: str) -> None:
    assert _lines(logged) == [7]


@pytest.mark.parametrize(
    "used",
    [
        "total.backward()\n",
        "log(value=total)\n",  # an unknown function
        "torch.save(total, 'x')\n",
        "self.total = 1\n",  # an attribute of that name: not known to be another value
        "x = [*total]\n",
        "y = {**total}\n",
        "z = t[total]\n",
    ],
)
def test_other_uses_are_not_reported(used: str) -> None:
    assert _lines(used) == []


def test_the_fix_detaches_the_accumulated_value() -> None:
    source = LOOP.replace("total += loss", "total += loss * 2") + "print(total)\n"
    fixed = lint_source(source, rules=[LossAccumulation], fix=True).source
    assert "    total += (loss * 2).detach()\n" in fixed


LEAF_TOTAL = """\
import torch
model = torch.nn.Linear(3, 1)
total = torch.zeros(1, requires_grad=True)
for x in torch.rand(4, 2, 3):
    total += model(x).sum()
total.backward()
"""


def test_a_running_total_made_a_leaf_drops_requires_grad_instead_of_no_grad() -> None:
    # GF201 used to wrap the `+=` in `no_grad`: the total then never saw the losses
    result = lint_source(LEAF_TOTAL, rules=[LeafInplace, LossAccumulation], fix=True)
    assert [f.code for f in result.findings] == ["GF403"]
    assert "total = torch.zeros(1)\n" in result.source
    assert "no_grad" not in result.source


def test_a_trained_leaf_updated_in_place_stays_with_gf201() -> None:
    source = LEAF_TOTAL.replace("total.backward()", "opt = torch.optim.SGD([total], lr=0.1)")
    result = lint_source(source, rules=[LeafInplace, LossAccumulation])
    assert [f.code for f in result.findings] == ["GF201"]
