"""Blocks of statements as LibCST holds them, asked on ``ast`` (``Semantic.statement_block``,
``Semantic.in_one_line_suite``), and ``is_backward_call``: what the ported GF401-GF403
use to find the statements that follow a call."""

from __future__ import annotations

import ast
import textwrap

import pytest

from gradfix.semantic import Semantic
from gradfix.semantic.syntax import is_backward_call, is_concatenated_string, spelled_names

SOURCE = textwrap.dedent(
    """\
    if a:
        first()
    elif b: second(); third()
    else:
        if c:
            fourth()
    for x in y: fifth()
    try: sixth()
    except E: seventh()
    finally:
        eighth()
    """
)


def _semantic() -> tuple[Semantic, dict[str, ast.stmt]]:
    tree = ast.parse(SOURCE)
    by_call = {
        node.value.func.id: node
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
    }
    return Semantic(tree, SOURCE), by_call  # type: ignore[return-value]


@pytest.mark.parametrize(
    ("call", "suite"),
    [
        ("first", False),
        ("second", True),
        ("third", True),
        ("fourth", False),
        ("fifth", True),
        ("sixth", True),
        ("seventh", True),
        ("eighth", False),
    ],
)
def test_one_line_suites(call: str, suite: bool) -> None:
    semantic, statements = _semantic()
    assert semantic.in_one_line_suite(statements[call]) is suite


def test_statement_block_is_the_list_holding_the_statement() -> None:
    semantic, statements = _semantic()
    block = semantic.statement_block(statements["third"])
    assert block is not None and [s.value.func.id for s in block] == ["second", "third"]  # type: ignore[attr-defined]
    assert semantic.statement_block(semantic.module.body[0]) is semantic.module.body


def test_an_elif_has_no_block_and_a_nested_if_in_else_has_one() -> None:
    semantic, _ = _semantic()
    outer = semantic.module.body[0]
    assert isinstance(outer, ast.If)
    elif_ = outer.orelse[0]
    nested = elif_.orelse[0]  # type: ignore[attr-defined]
    assert semantic.statement_block(elif_) is None
    assert semantic.statement_block(nested) is elif_.orelse  # type: ignore[attr-defined]


def test_suite_after_a_non_ascii_header() -> None:
    source = "if 'é' in s: go()\nstay()\n"
    tree = ast.parse(source)
    semantic = Semantic(tree, source)
    go = tree.body[0].body[0]  # type: ignore[attr-defined]
    assert semantic.in_one_line_suite(go)
    assert not semantic.in_one_line_suite(tree.body[1])


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("loss.backward()", True),
        ("torch.autograd.backward(loss)", True),
        ("backward(loss)", False),
        ("loss.backward_hook()", False),
        ("torch.autograd.grad(loss, x)", False),
    ],
)
def test_is_backward_call(code: str, expected: bool) -> None:
    call = ast.parse(code).body[0].value  # type: ignore[attr-defined]
    assert is_backward_call(call) is expected


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ('"a" "b"', True),
        ("('a'\n 'b')", True),
        ("('a'\n     'b'\n   'c')", True),
        ("b'a' b'b'", True),
        ('"a b"', False),
        ("'''a'' '''", False),
        ("3", False),
    ],
)
def test_is_concatenated_string(code: str, expected: bool) -> None:
    expr = ast.parse(code).body[0].value  # type: ignore[attr-defined]
    assert is_concatenated_string(expr, code) is expected


@pytest.mark.parametrize(
    ("code", "names"),
    [
        ("import a.b as c", [("a", "b", "c")]),
        ("from a.b import c", [("a", "b"), ("c",)]),
        ("from . import c", [(), ("c",)]),
        ("obj.total", [("total",), ("obj",)]),
        ("f(total=1)", [("f",), ("total",)]),
        ("def total(x): global y", [("total",), ("x",), ("y",)]),
    ],
)
def test_spelled_names(code: str, names: list[tuple[str, ...]]) -> None:
    spelling = (ast.Name, ast.Attribute, ast.keyword, ast.arg, ast.alias, ast.ImportFrom)
    nodes = [n for n in ast.walk(ast.parse(code)) if isinstance(n, (*spelling, ast.stmt))]
    spelled = [spelled_names(n) for n in nodes if isinstance(n, spelling) or spelled_names(n)]
    assert sorted(spelled) == sorted(names)
