"""The fix side: ast nodes found in LibCST's tree by position, and the edits vocabulary."""

from __future__ import annotations

import ast

import libcst as cst
import pytest

from gradfix.edits import Editor, ast_range, with_argument, without_argument
from gradfix.engine import parse

SOURCE = (
    "import torch as th\n"
    "s = 'héllo'; w = th.zeros(2, requires_grad=True)  # ünïcode before\n"
    "y = (w * 2).sum()\n"
    "\x0c\n"  # a form feed line: no line break of its own for ast
    "for p in [w]:\n"
    "    p.add_(1)\n"
)


CST_NAMES = {
    ast.BinOp: ("BinaryOperation",),
    ast.Constant: ("SimpleString", "Integer", "Name"),
    ast.Compare: ("Comparison",),
}


def editor_and_tree() -> tuple[Editor, ast.Module]:
    return Editor(parse(SOURCE), SOURCE, "th"), ast.parse(SOURCE)


def test_each_ast_node_has_its_libcst_node() -> None:
    editor, tree = editor_and_tree()
    for node in ast.walk(tree):
        if isinstance(node, (ast.expr, ast.stmt)) and not isinstance(node, ast.Starred):
            found = editor.node(node)
            assert editor.positions[found] == ast_range(node, editor.lines), ast.dump(node)
            assert type(found).__name__ in CST_NAMES.get(type(node), (type(node).__name__,))


def test_statement_is_the_line_of_a_simple_statement_or_the_compound_one() -> None:
    editor, tree = editor_and_tree()
    zeros = tree.body[2]
    line = editor.statement(zeros)
    assert isinstance(line, cst.SimpleStatementLine) and len(line.body) == 2
    loop = tree.body[-1]
    assert isinstance(editor.statement(loop), cst.For)
    inner = loop.body[0]  # type: ignore[attr-defined]
    assert isinstance(editor.parent(editor.statement(inner)), cst.IndentedBlock)


def test_a_node_the_tree_does_not_hold_is_a_lookup_error() -> None:
    editor, _ = editor_and_tree()
    with pytest.raises(LookupError):
        editor.node(ast.parse("zzz").body[0])


def test_torch_is_spelled_with_the_files_alias() -> None:
    editor, _ = editor_and_tree()
    assert editor.code(editor.torch_attr("nn.functional.relu")) == "th.nn.functional.relu"
    assert editor.torch_imports == ()
    assert Editor(parse("x = 1\n"), "x = 1\n", None).torch_imports == ("torch",)


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ("f()", "f(dim=1)"),
        ("f(a)", "f(a, dim=1)"),
        ("f(a, b)", "f(a, b, dim=1)"),
        ("f(\n    a,\n    b,\n)", "f(\n    a,\n    b,\n    dim=1,\n)"),
        ("f(a, dim=0)", "f(a, dim=1)"),
        ("f(\n    a,\n    b,  # why\n)", "f(\n    a,\n    b,  # why\n    dim=1,\n)"),
    ],
)
def test_with_argument_keeps_the_layout(before: str, after: str) -> None:
    call = cst.ensure_type(cst.parse_expression(before), cst.Call)
    assert cst.Module([]).code_for_node(with_argument(call, "dim", "1")) == after


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ("f(a, requires_grad=True)", "f(a)"),
        ("f(a, requires_grad=True, b=1)", "f(a, b=1)"),
        ("f(\n    a,\n    requires_grad=True,\n)", "f(\n    a,\n)"),
        ("f(a)", "f(a)"),
        ("f(\n    a,  # why\n    requires_grad=True,\n)", "f(\n    a,  # why\n)"),
        ("f(\n    a,  # why\n    requires_grad=True)", "f(\n    a,  # why\n    )"),
    ],
)
def test_without_argument_leaves_no_dangling_comma(before: str, after: str) -> None:
    call = cst.ensure_type(cst.parse_expression(before), cst.Call)
    assert cst.Module([]).code_for_node(without_argument(call, "requires_grad")) == after


LAYOUTS = [
    "# header\n\n\nimport torch\n\n\n@deco(a)\nclass A:\n    '''doc\n    lines'''\n\n"
    "    x = f(\n        1)\n\n\n# between\ny = A()\n",
    "import torch\nw = torch.ones(2)\nw.add_(1)",  # no newline at the end
    "import torch\r\nw = torch.ones(2)\r\n\r\nw.add_(1)\r\n",  # \r\n: the whole module's ranges
    "x = 1; y = (x +\n  2)\nif x:\n    z = [\n        y for y in x\n    ]\n# footer\n",
    "s = '''a\nb'''\nt = s\n\x0c\ndef f(a=s):\n    return a\n",
]  # fmt: skip


@pytest.mark.parametrize("source", LAYOUTS)
def test_nodes_found_by_statement_are_those_of_the_whole_module(source: str) -> None:
    """The editor resolves ranges one top-level statement at a time: the same nodes, at
    the same ranges, as LibCST's ranges of the whole module give."""
    from gradfix.edits import _cst_types

    by_statement = Editor(parse(source), source, "torch")
    whole = Editor(parse(source), source, "torch")
    whole._statements.index_at = lambda line: None  # type: ignore[method-assign]
    tree, found = ast.parse(source), 0
    for node in ast.walk(tree):
        if type(node) not in _cst_types() or isinstance(node, ast.Module):
            continue
        ours, theirs = by_statement.node(node), whole.node(node)
        assert whole.positions[theirs] == by_statement.positions[ours]
        assert by_statement.module.code_for_node(ours) == whole.module.code_for_node(theirs)
        found += 1
    assert found > 5
    assert bool(by_statement._statements._first_lines) == ("\r" not in source)
