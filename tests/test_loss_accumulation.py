"""GF403 loss-accumulation: which uses of the running total only log it."""

from __future__ import annotations

import textwrap

import pytest

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
        "def f(total):\n    pass\n",
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
