"""GF104 tensor-copy-construct: a name is a tensor only when every binding reaching the
copy holds one."""

from __future__ import annotations

import textwrap

import pytest

from gradfix.codemods.tensor_copy_construct import TensorCopyConstruct
from gradfix.engine import lint_source


def codes(code: str) -> list[str]:
    source = "import torch\n" + textwrap.dedent(code).lstrip("\n")
    return [f.code for f in lint_source(source, rules=[TensorCopyConstruct]).findings]


@pytest.mark.parametrize(
    "code",
    [
        # a list on one branch
        "def pick(rows, i, masked):\n    if masked:\n        m = rows[i]\n    else:\n"
        "        m = torch.ones(3)\n    return torch.tensor(m, dtype=torch.long)\n",
        # a list unless a later branch replaced it
        "m = [1, 0, 1]\nif flag:\n    m = torch.ones(3)\nt = torch.tensor(m)\n",
        # a loop that may not run
        "m = [1.0]\nfor step in steps:\n    m = torch.rand(2)\nt = torch.tensor(m)\n",
    ],
)
def test_a_name_that_may_hold_data_is_not_reported(code: str) -> None:
    assert codes(code) == []


@pytest.mark.parametrize(
    "code",
    [
        "w = torch.rand(3)\nif flag:\n    w = w * 2\nt = torch.tensor(w)\n",
        "if flag:\n    w = torch.rand(3)\nelse:\n    w = torch.zeros(3)\nt = torch.tensor(w)\n",
        "w = [1.0]\nw = torch.rand(3)\nt = torch.tensor(w)\n",  # the list is gone
    ],
)
def test_a_tensor_on_every_path_is_reported(code: str) -> None:
    assert codes(code) == ["GF104"]
