"""The rules' walk over ``ast``: source order, leave after the subtree, a rule that raises
is dropped and the others go on."""

from __future__ import annotations

import ast
import textwrap

import pytest

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
    alone = _Events()
    walk_ast_batched(ast.parse(AST_SOURCE), [alone])
    assert good.events == alone.events  # the node a visitor raised on is not lost to the next


def test_ast_walk_raises_without_on_error() -> None:
    from gradfix.walk import walk_ast_batched

    class Raises(_Events):
        def visit_Name(self, node: ast.Name) -> None:
            raise ValueError(node.id)

    with pytest.raises(ValueError, match="deco"):
        walk_ast_batched(ast.parse(AST_SOURCE), [_Events(), Raises()])


class _Calls:
    """Handles calls and the leaving of functions and loops only (most nodes: no handler)."""

    def __init__(self) -> None:
        self.events: list[str] = []

    def visit_Call(self, node: ast.Call) -> None:
        self.events.append(f"call {ast.unparse(node.func)}")

    def leave_FunctionDef(self, node: ast.FunctionDef) -> None:
        self.events.append(f"leave {node.name}")

    def leave_For(self, node: ast.For) -> None:
        self.events.append("leave for")

    def visit_Integer(self, node: object) -> None:
        raise AssertionError("not an ast node type: never called")


NESTED_SOURCE = (
    "@deco(a())\ndef f(x=g()):\n    for i in h():\n        def inner():\n            k()\n"
    "        m(n(i))\n    p()\nq()\ndef last(): pass\n"
)


def test_ast_walk_by_type_visits_only_handled_types_in_the_same_order() -> None:
    """With the analysis's nodes by type, the walk skips the nodes no visitor handles and
    calls the others (leaves included) exactly as the full walk does."""
    from gradfix.semantic import Semantic
    from gradfix.walk import handled_types, walk_ast_batched

    tree = ast.parse(NESTED_SOURCE)
    semantic = Semantic(tree, NESTED_SOURCE)
    full, filtered, mixed = _Calls(), _Calls(), _Calls()
    walk_ast_batched(tree, [full])
    walk_ast_batched(
        tree, [filtered], order=semantic.order, last=semantic.last, by_type=semantic.by_type
    )
    expected = ["call deco", "call a", "call g", "call h", "call k", "leave inner"]
    expected += ["call m", "call n", "leave for", "call p", "leave f", "call q", "leave last"]
    assert full.events == filtered.events == expected
    events = _Events()  # visits names: a second visitor's types join the walk
    walk_ast_batched(
        tree, [mixed, events], order=semantic.order, last=semantic.last, by_type=semantic.by_type
    )
    assert mixed.events == expected and "i" in events.events
    assert handled_types(_Calls) == {ast.Call, ast.FunctionDef, ast.For}


def test_ast_walk_of_the_nodes_the_analysis_listed() -> None:
    """The analysis lists the nodes of the walked types during its traversal: walking that
    list calls the visitors exactly as the full walk does; a list that lacks a type some
    visitor handles is not used (the walk picks the nodes by type instead)."""
    from gradfix.semantic import Semantic
    from gradfix.walk import walk_ast_batched, walked_types

    tree = ast.parse(NESTED_SOURCE)
    expected = _Calls()
    walk_ast_batched(tree, [expected])
    listed_types = walked_types((_Calls,))
    assert listed_types == {ast.Call, ast.FunctionDef, ast.For}
    semantic = Semantic(tree, NESTED_SOURCE, walked=listed_types)
    assert [type(n) for n in semantic.walked_nodes].count(ast.Call) == len(
        semantic.by_type[ast.Call]
    )
    assert semantic.walked_nodes == sorted(semantic.walked_nodes, key=semantic.order.__getitem__)
    listed = _Calls()
    walk_ast_batched(
        tree,
        [listed],
        order=semantic.order,
        last=semantic.last,
        walked=(semantic.walked_types, semantic.walked_nodes),
    )
    assert listed.events == expected.events
    # the names a second visitor reads are not in the list: the walk does not use it
    short = Semantic(tree, NESTED_SOURCE, walked=frozenset({ast.Call}))
    mixed, events = _Calls(), _Events()
    walk_ast_batched(
        tree,
        [mixed, events],
        order=short.order,
        last=short.last,
        by_type=short.by_type,
        walked=(short.walked_types, short.walked_nodes),
    )
    assert mixed.events == expected.events and "i" in events.events


def test_descendants_of_one_type_in_source_order() -> None:
    from gradfix.semantic import Semantic

    tree = ast.parse(NESTED_SOURCE)
    semantic = Semantic(tree, NESTED_SOURCE)
    function = tree.body[0]
    loop = function.body[0]  # type: ignore[attr-defined]
    calls = [ast.unparse(c.func) for c in semantic.descendants(loop, ast.Call)]
    assert calls == ["h", "k", "m", "n"]
    names = [f.name for f in semantic.descendants(tree, ast.FunctionDef)]
    assert names == ["f", "inner", "last"]
    assert semantic.descendants(loop.body[0], ast.For) == []  # type: ignore[attr-defined]


class _Where:
    calls = frozenset({"where"})

    def __init__(self) -> None:
        self.seen: list[str] = []

    def visit_Call(self, node: ast.Call) -> None:
        self.seen.append(ast.unparse(node.func))


def test_a_visitor_declaring_its_calls_gets_those_spellings_and_their_aliases_only() -> None:
    from gradfix.semantic import Semantic
    from gradfix.walk import walk_ast_batched

    source = (
        "import torch\nfrom torch import where as w\nimport torch as t\n"
        "a = torch.where(c, x, y)\nb = w(c, x, y)\nd = t.where(c, x, y)\n"
        "e = torch.exp(x)\nf = x.where(c, y)\ng = where(c)\nh = fns[0](x)\n"
    )
    tree = ast.parse(source)
    semantic = Semantic(tree, source)
    walked = dict(order=semantic.order, last=semantic.last, by_type=semantic.by_type)
    declared, every = _Where(), _Calls()
    walk_ast_batched(tree, [declared, every], call_aliases=semantic.call_aliases(), **walked)
    assert declared.seen == ["torch.where", "w", "t.where", "x.where", "where"]
    assert len(every.events) == 7  # a visitor without ``calls`` sees every call
    unfiltered = _Where()
    walk_ast_batched(tree, [unfiltered], **walked)  # no aliases given: every call
    assert len(unfiltered.seen) == 7


class _SubscriptAssigns:
    assign_targets = frozenset({ast.Subscript})

    def __init__(self) -> None:
        self.seen: list[str] = []

    def visit_Assign(self, node: ast.Assign) -> None:
        self.seen.append(ast.unparse(node))


def test_a_visitor_declaring_assign_targets_gets_those_assignments_only() -> None:
    from gradfix.semantic import Semantic
    from gradfix.walk import walk_ast_batched

    source = "a = 1\nx[0] = a\nself.w = a\nb = c = 2\nd, e = 1, 2\ny[1][2] = b\nf: int = 3\n"
    tree = ast.parse(source)
    semantic = Semantic(tree, source)
    walked = dict(order=semantic.order, last=semantic.last, by_type=semantic.by_type)
    declared, every = _SubscriptAssigns(), _SubscriptAssigns()
    walk_ast_batched(tree, [declared], **walked)
    # one target of a declared type, or several targets; not ``f: int = 3`` (AnnAssign)
    assert declared.seen == ["x[0] = a", "b = c = 2", "y[1][2] = b"]
    walk_ast_batched(tree, [every], filter_assigns=False, **walked)
    assert len(every.seen) == 6


def _reports(
    rule: type, source: str, aliases: bool, filter_assigns: bool = True
) -> list[tuple[int, int, str]]:
    from gradfix.rule import RuleContext
    from gradfix.semantic import Semantic
    from gradfix.walk import walk_ast_batched

    tree = ast.parse(source)
    semantic = Semantic(tree, source)
    visitor = rule(RuleContext("x.py", source, semantic))
    walk_ast_batched(
        tree,
        [visitor],
        order=semantic.order,
        last=semantic.last,
        by_type=semantic.by_type,
        call_aliases=semantic.call_aliases() if aliases else None,
        filter_assigns=filter_assigns,
    )
    return [(r.position.start.line, r.position.start.column, r.message) for r in visitor.reports]


@pytest.mark.parametrize(
    ("declared", "unfiltered", "at_least", "reports"),
    [
        ("calls", {"aliases": False}, 10, 50),  # no import aliases given: every call
        ("takes_call", {"aliases": False}, 2, 40),
        ("assign_targets", {"filter_assigns": False}, 8, 50),
    ],
)
def test_rules_declaring_a_filter_find_what_they_find_when_handed_every_node(
    declared: str, unfiltered: dict[str, bool], at_least: int, reports: int
) -> None:
    """``calls``, ``takes_call`` and ``assign_targets`` are promises: on the fixtures, the
    real-world cases and the rules' examples, each rule that declares one reports the same
    with and without the walk's filter."""
    from pathlib import Path

    from gradfix.registry import all_rules

    root = Path(__file__).resolve().parents[1]
    paths = sorted(root.glob("fixtures/*/*.py")) + sorted(root.glob("bench/realworld/*.py"))
    sources = [p.read_text(encoding="utf-8") for p in paths]
    declaring = [r for r in all_rules() if getattr(r, declared, None) is not None]
    assert len(declaring) >= at_least
    found = 0
    for rule in declaring:
        examples = [textwrap.dedent(e.code) for e in (*rule.VALID, *rule.INVALID)]
        for source in sources + examples:
            try:
                ast.parse(source)
            except SyntaxError:
                continue
            filtered = _reports(rule, source, aliases=True)
            every = _reports(rule, source, **{"aliases": True, **unfiltered})
            assert filtered == every, (rule.code, source[:80])
            found += len(filtered)
    assert found > reports


# -- the words a rule needs: files that spell none of them are not walked for it ------------


def test_rules_for_source_keeps_a_rule_only_where_one_of_its_words_is_spelled() -> None:
    from types import MappingProxyType

    from gradfix.rule import Rule, rules_for_source

    class NeedsGrad(Rule):
        code = "GF990"
        needs = frozenset({"grad"})

    class NeedsWhere(Rule):
        code = "GF991"
        needs = frozenset({"where", "select"})

    class Any(Rule):
        code = "GF993"
        calls = frozenset({"where"})  # the walk's filter: no words needed

    rules = [NeedsGrad, NeedsWhere, Any]
    assert Any.needed_words() is None
    # whole words only: neither ``requires_grad`` nor ``whereas`` spells one
    source = "x.requires_grad_()\nno_grad()\nwhereas = grad_\n"
    assert rules_for_source(rules, source) == [Any]
    assert rules_for_source(rules, "print(p.grad)\n") == [NeedsGrad, Any]
    assert rules_for_source(rules, "grad") == [NeedsGrad, Any]  # at both ends of the text
    assert rules_for_source(rules, "# see torch.where\n") == [NeedsWhere, Any]
    assert rules_for_source(rules, "x.selected\ny = select(x)\n") == [NeedsWhere, Any]
    assert rules_for_source(rules, "from torch import where as w\nw(c, a, b)\n")[0] is NeedsWhere
    assert rules_for_source(rules, "s = 'grad'\n")[0] is NeedsGrad  # strings count too
    assert rules_for_source(rules, "gradé = grad2\n") == [Any]  # letters of every script
    # a rule told what a run proved at a line runs whatever the file spells
    told = type("Told", (NeedsGrad,), {"runtime": MappingProxyType({1: frozenset({"k"})})})
    assert rules_for_source([told], "x = 1\n") == [told]
    # a name whose canonical form ends in a needed word counts (its import spells it)
    functional = type("Functional", (Rule,), {"code": "GF994", "needs": frozenset({"functional"})})
    assert "F" in (functional.needed_words() or ())


def test_rules_needing_words_find_nothing_in_a_file_that_spells_none_of_them() -> None:
    """``needs`` is a promise: on the fixtures, the real-world cases and the rules'
    examples, a rule the engine would not run on a source reports nothing there when it
    is run; and each rule's own invalid examples spell its words."""
    from pathlib import Path

    from gradfix.registry import all_rules
    from gradfix.rule import rules_for_source

    root = Path(__file__).resolve().parents[1]
    paths = sorted(root.glob("fixtures/*/*.py")) + sorted(root.glob("bench/realworld/*.py"))
    sources = [p.read_text(encoding="utf-8") for p in paths]
    needing = [r for r in all_rules() if r.needed_words() is not None]
    assert {"GF105", "GF106", "GF401", "GF404"} <= {r.code for r in needing}
    examples = {
        rule: [textwrap.dedent(e.code) for e in (*rule.VALID, *rule.INVALID)]
        for rule in all_rules()
    }
    skipped = 0
    for rule in needing:
        for invalid in rule.INVALID:
            assert rules_for_source([rule], textwrap.dedent(invalid.code)), rule.code
        for source in sources + [code for codes in examples.values() for code in codes]:
            if rules_for_source([rule], source):
                continue
            try:
                ast.parse(source)
            except SyntaxError:
                continue
            assert _reports(rule, source, aliases=True) == [], (rule.code, source[:80])
            skipped += 1
    assert skipped > 500
