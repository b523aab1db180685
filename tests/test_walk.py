"""The fast walk visits exactly what LibCST's visit does (code nodes, same order)."""

from __future__ import annotations

import ast
from pathlib import Path

import libcst as cst
import pytest

from gradfix.walk import CODE_TYPES, walk, walk_batched

ROOT = Path(__file__).resolve().parents[1]

SHAPES = '''
from __future__ import annotations
import torch as th, os.path
from torch import (nn, optim as o)
from .x import *
@th.no_grad()
@decorator(1, k=2)
async def f(a, /, b: int = 1, *args, c, d=th.ones(2), **kw) -> th.Tensor:
    """Doc."""
    global g
    x = y = [i * 2 for i in range(3) if i if not i] + {k: v for k, v in kw.items()}
    x[1:2, ::3] += -a ** 2 @ b
    async with ctx() as (p, q), other:
        await th.sleep(1)
    async for i in gen():
        yield i
    lam = lambda u, *w, z=1: (u, *w)
    s = f"{x!r:>{width}} {y=}" "tail" + rb"raw"
    t = x if a < b <= c and not d or e else (yield from z)
    del x[0], y.attr
    try:
        raise ValueError("e") from None
    except (TypeError, ValueError) as err:
        pass
    else:
        assert a, "m"
    finally:
        return {1, 2}, ..., {**kw}, [*args]
class C(nn.Module, metaclass=M):
    w: th.Tensor = None
    def forward(self, x):
        while (n := x.sum()) > 0:
            match n:
                case [1, *rest] | {"k": 2, **others} if rest:
                    break
                case Point(x=0, y=yy) as pt:
                    continue
                case _:
                    x -= 1
        return self.w @ x
type Alias[T: int = int, *Ts, **P] = list[T]
def generic[T](x: T) -> T: return x
'''


class _Recorder(cst.CSTVisitor):
    def __init__(self) -> None:
        super().__init__()
        self.events: list[tuple[str, int]] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        if type(node) in CODE_TYPES:
            self.events.append(("visit", id(node)))
        return True

    def on_leave(self, original_node: cst.CSTNode) -> None:
        if type(original_node) in CODE_TYPES:
            self.events.append(("leave", id(original_node)))


def _sources() -> list[tuple[str, str]]:
    files = sorted((ROOT / "fixtures").glob("*/*.py"))[::7] + sorted((ROOT / "src").rglob("*.py"))
    return [("shapes", SHAPES)] + [(str(p.relative_to(ROOT)), p.read_text()) for p in files]


@pytest.mark.parametrize(("name", "source"), _sources(), ids=lambda v: v if len(v) < 60 else "")
def test_walk_visits_the_code_nodes_in_libcsts_order(name: str, source: str) -> None:
    module = cst.parse_module(source)
    expected, got = _Recorder(), _Recorder()
    module.visit(expected)
    walk(module, got)
    assert got.events == expected.events


def test_returning_false_skips_the_children() -> None:
    module = cst.parse_module("def f():\n    x = 1\ny = 2\n")

    class Names(cst.CSTVisitor):
        def __init__(self) -> None:
            super().__init__()
            self.names: list[str] = []

        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            return False

        def visit_Name(self, node: cst.Name) -> None:
            self.names.append(node.value)

    visitor = Names()
    walk(module, visitor)
    assert visitor.names == ["y"]


def test_batched_visitors_all_see_every_node_and_leave_in_order() -> None:
    module = cst.parse_module("a = b(c)\n")
    seen: list[str] = []

    class First(cst.BatchableCSTVisitor):
        def visit_Name(self, node: cst.Name) -> None:
            seen.append("1" + node.value)

        def leave_Call(self, original_node: cst.Call) -> None:
            seen.append("1leave")

    class Second(cst.BatchableCSTVisitor):
        def visit_Name(self, node: cst.Name) -> bool:
            seen.append("2" + node.value)
            return False  # batched: ignored, as in LibCST

    walk_batched(module, [First(), Second()])
    assert seen == ["1a", "2a", "1b", "2b", "1c", "2c", "1leave"]


def test_a_batched_visitor_that_raises_is_dropped_and_the_others_go_on() -> None:
    module = cst.parse_module("a = b(c)\n")
    seen: list[str] = []

    class Breaks(cst.BatchableCSTVisitor):
        def visit_Name(self, node: cst.Name) -> None:
            seen.append("1" + node.value)
            if node.value == "b":
                raise KeyError(node.value)

        def leave_Call(self, original_node: cst.Call) -> None:
            seen.append("1leave")

    class Works(cst.BatchableCSTVisitor):
        def visit_Name(self, node: cst.Name) -> None:
            seen.append("2" + node.value)

        def leave_Call(self, original_node: cst.Call) -> None:
            seen.append("2leave")

    breaks = Breaks()
    failed: list[tuple[object, str]] = []
    walk_batched(module, [breaks, Works()], on_error=lambda v, e: failed.append((v, repr(e))))
    assert seen == ["1a", "2a", "1b", "2b", "2c", "2leave"]
    assert failed == [(breaks, "KeyError('b')")]
    with pytest.raises(KeyError):
        walk_batched(module, [Breaks()])  # without on_error the exception propagates


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
