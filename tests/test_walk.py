"""The rules' walk over ``ast``: source order, leave after the subtree, a rule that raises
is dropped and the others go on."""

from __future__ import annotations

import ast

# -- the walk of the rules on ``ast`` ---------------------------------------------------------


class _Events:
    def __init__(self) -> None:
        self.events: list[str] = []

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self.events.append(f"visit {node.name}")

    def leave_FunctionDef(self, node: ast.FunctionDef) -> None:
        self.events.append(f"leave {node.name}")

    def visit_Name(self, node: ast.Name) -> None:
        self.events.append(node.id)


AST_SOURCE = "@deco\ndef outer(a=default):\n    def inner():\n        body\n    after\nlast\n"


def test_ast_walk_visits_in_source_order_and_leaves_after_the_subtree() -> None:
    from gradfix.semantic import Semantic
    from gradfix.walk import walk_ast_batched

    tree = ast.parse(AST_SOURCE)
    expected = ["visit outer", "deco", "default", "visit inner", "body", "leave inner"]
    expected += ["after", "leave outer", "last"]
    walked, driven = _Events(), _Events()
    walk_ast_batched(tree, [walked])
    semantic = Semantic(tree, AST_SOURCE)
    walk_ast_batched(tree, [driven], order=semantic.order, last=semantic.last)
    assert walked.events == driven.events == expected


def test_ast_walk_drops_a_visitor_that_raises_and_goes_on() -> None:
    from gradfix.walk import walk_ast_batched

    class Raises(_Events):
        def visit_Name(self, node: ast.Name) -> None:
            raise ValueError(node.id)

    good, bad = _Events(), Raises()
    failures: list[tuple[object, str]] = []
    walk_ast_batched(ast.parse(AST_SOURCE), [bad, good], lambda v, e: failures.append((v, str(e))))
    assert failures == [(bad, "deco")]
    assert good.events[-1] == "last" and bad.events == ["visit outer"]  # nothing after
