"""GF105 integer-requires-grad: integer tensors used as ids keep their integers."""

from __future__ import annotations

import textwrap

import pytest

from gradfix.codemods.integer_requires_grad import IntegerRequiresGrad
from gradfix.engine import lint_source


def _fixed(body: str) -> str:
    source = "import torch\nimport torch.nn.functional as F\n" + textwrap.dedent(body)
    return lint_source(source, rules=[IntegerRequiresGrad], fix=True).source


@pytest.mark.parametrize(
    "use",
    [
        "loss = F.cross_entropy(torch.randn(2, 3), ids)\n",
        "rows = torch.randn(5, 2)[ids]\n",
        "vectors = F.embedding(ids, torch.randn(5, 2))\n",
    ],
)
def test_ids_lose_requires_grad_instead_of_becoming_floats(use: str) -> None:
    fixed = _fixed("ids = torch.tensor([1, 2], requires_grad=True)\n" + use)
    assert "ids = torch.tensor([1, 2])\n" in fixed


def test_integers_used_as_values_become_floats() -> None:
    fixed = _fixed("x = torch.tensor([1, 2], requires_grad=True)\ny = (x * 2).sum()\n")
    assert "x = torch.tensor([1.0, 2.0], requires_grad=True)\n" in fixed


def test_indices_of_max_asked_for_grad_are_reported_without_a_fix() -> None:
    source = (
        "import torch\n_, idx = torch.max(torch.randn(2, 3), dim=1)\nidx.requires_grad = True\n"
    )
    findings = lint_source(source, rules=[IntegerRequiresGrad]).findings
    assert [(f.line, f.fix) for f in findings] == [(3, None)]
