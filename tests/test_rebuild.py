"""gradfix.rebuild on ast: what LibCST's tree told apart that ``ast`` does not show."""

from __future__ import annotations

import ast
import textwrap

import pytest

from gradfix.codemods.self_referencing_index_assign import SelfReferencingIndexAssign
from gradfix.engine import lint_source
from gradfix.rebuild import index_elements, names_in
from gradfix.semantic import Semantic

HEADER = """
import torch
v = torch.nn.Parameter(torch.rand(3))
p = v * 1.0
"""


def run(body: str):
    source = textwrap.dedent(HEADER).lstrip("\n") + textwrap.dedent(body).lstrip("\n")
    return lint_source(source, rules=[SelfReferencingIndexAssign], fix=True, unsafe_fixes=True)


@pytest.mark.parametrize(
    ("index", "count"),
    [("x[0, 2]", 2), ("x[(0, 2)]", 1), ("x[(0), 2]", 2), ("x[((0), (2))]", 1), ("x[()]", 1)],
)
def test_a_parenthesized_tuple_is_one_index(index: str, count: int) -> None:
    tree = ast.parse(index)
    subscript = tree.body[0].value  # type: ignore[attr-defined]
    assert len(index_elements(Semantic(tree, index), subscript)) == count


def test_indexing_with_one_tuple_is_not_a_literal_element() -> None:
    body = "w = torch.nn.Parameter(torch.rand(2, 3))\nh = w * 3.0\nh[(0, 2)] = h[0, 0] / h[1, 1]\n"
    assert run(body).findings == []


@pytest.mark.parametrize(
    ("fill", "safety"),
    [
        ("p[0] = 1.0\n", "safe"),
        ("p[0] = 1.0;  # one statement, a semicolon\n", "safe"),
        ("p[0] = 1.0; q = 2\n", "unsafe"),  # a line of two statements
        ("if v is not None: p[0] = 1.0\n", "unsafe"),  # a one-line block
        ("q = p\n", "unsafe"),  # an alias
    ],
)
def test_only_a_fill_alone_on_its_line_is_not_an_alias(fill: str, safety: str) -> None:
    findings = run(fill + "p[2] = p[0] / p[1]\n").findings
    assert [f.fix.safety if f.fix else None for f in findings] == [safety]


def test_names_in_skips_signatures() -> None:
    tree = ast.parse("def f(a=b, *, c: d = e):\n    return a + g\n")
    assert [n.id for n in names_in(tree)] == ["a", "g"]


def test_a_form_feed_does_not_shift_lines() -> None:
    findings = run("\f\np[0] = 1.0; q = 2\np[2] = p[0] / p[1]\n").findings
    assert [f.fix.safety if f.fix else None for f in findings] == ["unsafe"]
