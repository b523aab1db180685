"""Suppression comments: ``# noqa: CODE`` and ``# gradfix: ignore[CODE]``."""

from __future__ import annotations

import pytest

from gradfix.codemods import ALL_RULES
from gradfix.engine import lint_source
from gradfix.suppression import suppressed_codes

HEADER = "import torch\nw = torch.randn(3, requires_grad=True)\n"


def codes(source: str) -> list[tuple[int, str]]:
    result = lint_source(HEADER + source, rules=ALL_RULES)
    return [(f.line - 2, f.code) for f in result.findings]


@pytest.mark.parametrize(
    "comment",
    [
        "# noqa: GF201",
        "# noqa:GF201",
        "# NOQA: GF101, GF201",
        "# noqa",
        "# gradfix: ignore[GF201]",
        "# gradfix: ignore[GF101,GF201]",
        "# gradfix: ignore",
        "# why: a reason first  # noqa: GF201",
    ],
)
def test_comment_on_the_reported_line_suppresses(comment: str) -> None:
    assert codes(f"w.normal_()  {comment}\n") == []


@pytest.mark.parametrize(
    "comment", ["# noqa: GF101", "# gradfix: ignore[GF202]", "# ignore", "# type: ignore"]
)
def test_other_codes_or_malformed_comments_do_not_suppress(comment: str) -> None:
    assert codes(f"w.normal_()  {comment}\n") == [(1, "GF201")]


def test_first_line_of_a_multi_line_statement_suppresses() -> None:
    source = "a0 = w[0] * 2\nA = torch.tensor(  # noqa: GF101\n    [a0, w[1]],\n)\n"
    assert codes(source) == []
    inner = "a0 = w[0] * 2\nA = torch.stack([\n    torch.tensor([a0, w[1]]).sum(),  # noqa: GF101\n"
    inner += "])\n"
    assert codes(inner) == []


def test_a_suppressed_line_is_never_rewritten() -> None:
    source = HEADER + "w.normal_()  # noqa: GF201\nw.uniform_()\n"
    result = lint_source(source, rules=ALL_RULES, fix=True)
    # GF201 wraps consecutive updates in one block: shared with the suppressed line, the
    # fix is dropped and the other finding is left for the user.
    assert result.source == source
    assert [(f.line, f.code, f.fix) for f in result.findings] == [(4, "GF201", None)]
    apart = HEADER + "w.normal_()  # noqa: GF201\nprint(w)\nw.uniform_()\n"
    fixed = lint_source(apart, rules=ALL_RULES, fix=True).source
    assert fixed.endswith("print(w)\nwith torch.no_grad():\n    w.uniform_()\n")


def test_a_noqa_inside_a_string_is_not_a_comment() -> None:
    assert suppressed_codes('x = "# noqa"\ny = 1  # noqa: GF101\n') == {2: frozenset({"GF101"})}
