"""GF204 decides what backward saved from the generated torch facts (issue 12): each case
is checked on torch by running it, the in-place change failing at backward or not."""

from __future__ import annotations

import textwrap

import pytest

from gradfix.codemods.inplace_on_saved import InplaceOnSaved
from gradfix.engine import lint_source

#: (the op and the in-place change after it, whether backward fails on torch 2.13)
CASES = [
    ("h = torch.hypot(x, c)\nh.add_(1)", True),  # hypot saves its result
    ("h = torch.dist(x, c)\nh.add_(1)", True),
    ("h = x.nansum()\nx.mul_(2)", True),  # the backward masks the nans of x
    ("h = 2 / x\nx.add_(1)", False),  # x.reciprocal() * 2 saves a fresh reciprocal
    ("h = torch.kron(x, c)\nc.add_(1)", False),  # kron saves reshaped copies
]


def program(body: str) -> str:
    return (
        "import torch\n\ndef f(w, c):\n    x = w * 1.0\n"
        + textwrap.indent(body, "    ")
        + "\n    return h.sum()\n\n"
        "f(torch.randn(3, 3, requires_grad=True), torch.randn(3, 3)).backward()\n"
    )


@pytest.mark.parametrize(("body", "fails"), CASES)
def test_inplace_on_saved_follows_torch(body: str, fails: bool) -> None:
    findings = lint_source(program(body), rules=[InplaceOnSaved]).findings
    assert bool(findings) == fails, findings


@pytest.mark.parametrize(("body", "fails"), CASES)
def test_the_cases_are_what_torch_does(body: str, fails: bool) -> None:
    pytest.importorskip("torch")
    try:
        exec(compile(program(body), "<case>", "exec"), {})
    except RuntimeError as error:
        assert fails and "modified by an inplace operation" in str(error)
    else:
        assert not fails
