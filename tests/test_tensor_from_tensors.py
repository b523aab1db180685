"""GF101 tensor-from-tensors: a tensor built only to be read as values (logged, printed,
plotted) is not a graph cut."""

from __future__ import annotations

import textwrap

import pytest

from gradfix.codemods.tensor_from_tensors import TensorFromTensors
from gradfix.engine import lint_source

LOSSES = (
    "w = torch.rand(3, requires_grad=True)\nlosses = []\n"
    "for i in range(3):\n    losses.append((w * i).sum())\n"
)


def codes(code: str) -> list[str]:
    source = "import numpy as np\nimport torch\n" + LOSSES + textwrap.dedent(code).lstrip("\n")
    return [f.code for f in lint_source(source, rules=[TensorFromTensors]).findings]


@pytest.mark.parametrize(
    "code",
    [
        "np.array(torch.tensor(losses).numpy())\n",
        "print(torch.tensor(losses).detach().mean().item())\n",
        "values = torch.tensor(losses).tolist()\n",
        "print(torch.tensor(losses))\n",
        "np.mean(torch.tensor(losses))\n",
        "curve = torch.tensor(losses)\nnp.savetxt('c.txt', curve)\nprint(f'{curve[-1]:.3f}')\n",
    ],
)
def test_a_tensor_read_as_values_is_not_reported(code: str) -> None:
    assert codes(code) == []


@pytest.mark.parametrize(
    "code",
    [
        "total = torch.tensor(losses).sum()\ntotal.backward()\n",
        "curve = torch.tensor(losses)\nprint(curve.numpy())\nloss = curve.mean()\n",
        "curve = torch.tensor(losses)\n",  # no use: nothing says it is for values
        "loss = torch.tensor(losses).mean() * 2\n",
    ],
)
def test_a_tensor_used_as_a_tensor_is_reported(code: str) -> None:
    assert codes(code) == ["GF101"]
