"""GF203 row-loop-inplace: fix safety per site and report-only loops."""

from __future__ import annotations

import textwrap

import pytest

from gradfix.codemods import ALL_RULES
from gradfix.codemods.row_loop_inplace import RowLoopInplace
from gradfix.engine import lint_source

HEADER = """
import torch
w = torch.nn.Parameter(torch.rand(4, 3))
"""


def run(body: str):
    source = textwrap.dedent(HEADER).lstrip("\n") + textwrap.dedent(body).lstrip("\n")
    return lint_source(source, rules=[RowLoopInplace], fix=True, unsafe_fixes=True)


def only_finding(body: str):
    result = run(body)
    assert [f.code for f in result.findings] == ["GF203"]
    return result.findings[0], result.source


@pytest.mark.parametrize(
    "loop",
    [
        "for i in range(1, len(h)):\n    h[i] = h[i] * h[i - 1]\n",  # a recurrence
        "for i in range(len(h)):\n    h[i] = h[i] / h.sum()\n",  # sees rows already updated
        "for i in range(len(h)):\n    s = h[i].sum()\n    h[i] = h[i] / s\n",  # two statements
        "for i in range(0, len(h), 2):\n    h[i] = h[i] / h[i].sum()\n",  # a step
        "for i in range(len(h)):\n    h[i] = h[i] / h[i].sum()\nprint(i)\n",  # i read after
        "for i in range(len(h)):\n    if i:\n        h[i] = h[i] / h[i].sum()\n",  # a branch
        "for i in range(len(h)):\n    h[i] = h[i] / h[i].sum()\nelse:\n    pass\n",
        "for i in range(4):\n    h[:, i] = h[:, i] / h[:, i].sum()\n",  # columns
        "k = -1\nfor i in range(k, 3):\n    h[i] = h[i] / h[i].sum()\n",  # a start of any sign
    ],
)
def test_loops_that_cannot_become_one_expression_are_reported_without_fix(loop: str) -> None:
    finding, source = only_finding("h = w * 2.0\n" + loop)
    assert finding.fix is None
    assert "torch.stack" not in source


def test_all_rows_of_a_known_length_is_a_safe_fix() -> None:
    finding, source = only_finding(
        """
        h = torch.exp(w)
        for i in range(4):
            h[i] = h[i] / h[i].sum()
        """
    )
    assert finding.fix is not None and finding.fix.safety == "safe"
    assert source.endswith("\nh = torch.stack([h[i] / h[i].sum() for i in range(4)])\n")


@pytest.mark.parametrize(
    ("setup", "loop_range"),
    [
        ("h = torch.sigmoid(w @ w.T)", "range(len(h))"),  # zero rows? torch.stack([]) raises
        ("h = w * 2.0", "range(1, 4)"),  # part of the rows: the cat form
        ("h = w * 2.0", "range(3)"),  # a prefix only
        ("h = w * 2.0\nalias = h", "range(4)"),  # the loop wrote through `alias` too
    ],
)
def test_fixes_that_may_change_behaviour_are_unsafe(setup: str, loop_range: str) -> None:
    finding, _ = only_finding(f"{setup}\nfor i in {loop_range}:\n    h[i] = h[i] / h[i].sum()\n")
    assert finding.fix is not None and finding.fix.safety == "unsafe"


def test_right_hand_side_with_another_tensor_is_unsafe() -> None:
    finding, _ = only_finding(
        """
        scale = torch.rand(3)
        h = torch.exp(w)
        for i in range(4):
            h[i] = h[i] / h[i].sum() * scale
        """
    )
    assert finding.fix is not None and finding.fix.safety == "unsafe"


def test_partial_range_keeps_the_other_rows() -> None:
    _, source = only_finding(
        """
        h = w * 2.0
        for i in range(1, 3):
            h[i] = h[i] / h[i].sum()
        """
    )
    rebuilt = "torch.cat([h[:1], torch.stack([h[i] / h[i].sum() for i in range(1, 3)]), h[3:]])"
    assert f"h = {rebuilt}\n" in source


def test_leaf_is_left_to_leaf_inplace() -> None:
    source = textwrap.dedent(
        """
        import torch
        w = torch.rand(4, 3, requires_grad=True)
        for i in range(len(w)):
            w[i] = w[i] / w[i].sum()
        """
    ).lstrip("\n")
    codes = [f.code for f in lint_source(source, rules=ALL_RULES).findings]
    assert codes == ["GF201"]


def test_literal_index_is_left_to_self_referencing_index_assign() -> None:
    source = textwrap.dedent(
        """
        import torch
        w = torch.nn.Parameter(torch.rand(3))
        p = w * 2.0
        for step in range(3):
            p = w * 2.0
            p[2] = p[0] / p[1]
        """
    ).lstrip("\n")
    codes = [f.code for f in lint_source(source, rules=ALL_RULES).findings]
    assert codes == ["GF202"]
