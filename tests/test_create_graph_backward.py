"""GF402 create-graph-backward: when ``backward(create_graph=True)`` may become
``torch.autograd.grad`` and when it is reported without a fix."""

from __future__ import annotations

import textwrap

import pytest

from gradfix.codemods.create_graph_backward import CreateGraphBackward
from gradfix.engine import lint_source

PRELUDE = """
import torch
x = torch.linspace(0.0, 1.0, 5, requires_grad=True)
"""

REPORT_ONLY = {
    "grad already filled by an earlier backward": """
        (x ** 2).sum().backward()
        y = torch.sin(x).sum()
        y.backward(create_graph=True)
        g = x.grad
        """,
    "grad read after the next backward, reset in between": """
        y = torch.sin(x).sum()
        y.backward(create_graph=True)
        g = x.grad
        x.grad.zero_()
        g.sum().backward()
        print(x.grad)
        """,
    "leaf handed to an optimizer": """
        opt = torch.optim.SGD([x], lr=0.1)
        y = torch.sin(x).sum()
        y.backward(create_graph=True)
        g = x.grad
        opt.step()
        """,
    "read in another branch": """
        y = torch.sin(x).sum()
        if y > 0:
            y.backward(create_graph=True)
        g = x.grad
        """,
    "a leaf whose grad is never read": """
        w = torch.ones(5, requires_grad=True)
        y = (torch.sin(x) * w).sum()
        y.backward(create_graph=True)
        g = x.grad
        """,
    "graph through a user function": """
        def f(t):
            return t ** 3
        y = f(x).sum()
        y.backward(create_graph=True)
        g = x.grad
        """,
    "leaf read by a closure": """
        def show():
            print(x.grad)
        y = torch.sin(x).sum()
        y.backward(create_graph=True)
        g = x.grad
        show()
        """,
    "grad reset after use": """
        y = torch.sin(x).sum()
        y.backward(create_graph=True)
        g = x.grad
        x.grad = None
        """,
}


def _findings(source: str):
    return lint_source(textwrap.dedent(source), rules=[CreateGraphBackward]).findings


@pytest.mark.parametrize("case", [k for k, v in REPORT_ONLY.items() if v], ids=str)
def test_reported_without_fix(case: str) -> None:
    findings = _findings(PRELUDE + textwrap.dedent(REPORT_ONLY[case] or ""))
    assert [f.code for f in findings] == ["GF402"]
    assert findings[0].fix is None


@pytest.mark.parametrize(
    "example",
    [e for e in CreateGraphBackward.INVALID if e.report_only],
    ids=lambda e: e.code.strip().splitlines()[-1].strip()[:40],
)
def test_invalid_examples_without_expected_fix_get_none(example) -> None:
    findings = _findings(example.code)
    assert findings and all(f.fix is None for f in findings)


def test_message_tells_what_to_do() -> None:
    message = _findings(PRELUDE + "torch.sin(x).sum().backward(create_graph=True)\n")[0].message
    assert "torch.autograd.grad" in message and ".grad = None" in message


def test_gradient_becomes_grad_outputs() -> None:
    source = PRELUDE + textwrap.dedent(
        """
        y = torch.sin(x)
        y.backward(torch.ones_like(y), create_graph=True)  # per-element seed
        g = x.grad
        """
    )
    fixed = lint_source(source, rules=[CreateGraphBackward], fix=True).source
    assert (
        "(x_grad,) = torch.autograd.grad(y, x, grad_outputs=torch.ones_like(y), "
        "create_graph=True)  # per-element seed" in fixed
    )
    assert "g = x_grad" in fixed


def test_positional_options_are_kept_as_a_report() -> None:
    source = PRELUDE + "y = torch.sin(x).sum()\ny.backward(None, None, create_graph=True)\n"
    source += "g = x.grad\n"
    findings = _findings(source)
    assert [f.code for f in findings] == ["GF402"] and findings[0].fix is None


def test_one_line_suite_reads_are_replaced() -> None:
    source = (
        PRELUDE + "y = torch.sin(x).sum()\nif True: y.backward(create_graph=True); g = x.grad\n"
    )
    fixed = lint_source(source, rules=[CreateGraphBackward], fix=True).source
    assert fixed.endswith(
        "if True: (x_grad,) = torch.autograd.grad(y, x, create_graph=True); g = x_grad\n"
    )


@pytest.mark.parametrize(
    "store",
    ["a, x.grad = 1, g", "t[(x.grad, 0)] = 1", "g += x.grad", "del x.grad"],
)
def test_grad_stored_after_the_call_leaves_no_fix(store: str) -> None:
    source = (
        PRELUDE + f"y = torch.sin(x).sum()\ny.backward(create_graph=True)\ng = x.grad\n{store}\n"
    )
    findings = _findings(source)
    assert [f.code for f in findings] == ["GF402"] and findings[0].fix is None


def test_index_tuple_read_is_replaced() -> None:
    source = PRELUDE + "y = torch.sin(x).sum()\ny.backward(create_graph=True)\nt[x.grad, 0] = 1\n"
    fixed = lint_source(source, rules=[CreateGraphBackward], fix=True).source
    assert fixed.endswith("t[x_grad, 0] = 1\n")


def test_graph_through_a_concatenated_string_is_unknown() -> None:
    source = PRELUDE + 'y = torch.sin(x).sum() * ("a" "b")\ny.backward(create_graph=True)\n'
    findings = _findings(source + "g = x.grad\n")
    assert [f.code for f in findings] == ["GF402"] and findings[0].fix is None


def test_a_gradient_backpropagated_again_gets_its_grad_reset_first() -> None:
    # the second pass adds to `x.grad`, which still holds `g`: `x.grad` would read g + d2
    source = PRELUDE + textwrap.dedent(
        """
        y = torch.sin(x).sum()
        y.backward(create_graph=True)
        g = x.grad
        g.sum().backward()
        print(x.grad)
        """
    )
    fixed = lint_source(source, rules=[CreateGraphBackward], fix=True).source
    assert "g = x.grad\nx.grad = None\ng.sum().backward()\n" in fixed
