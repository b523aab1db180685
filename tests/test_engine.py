"""The engine: pure source -> findings + fixed source."""

from __future__ import annotations

import ast
import textwrap

import libcst as cst
import pytest

from gradfix.codemods import ALL_RULES
from gradfix.codemods.leaf_inplace import LeafInplace
from gradfix.engine import SourceError, add_imports, lint_source
from gradfix.rule import FixSafety, Rule
from gradfix.semantic import Semantic


def src(code: str) -> str:
    return textwrap.dedent(code).lstrip("\n")


GF101_SOURCE = src(
    """
    import torch
    a = torch.nn.Parameter(torch.rand(3))
    t = torch.tensor([a[0], a[1] * 2])
    """
)


def test_check_reports_without_changing_source() -> None:
    result = lint_source(GF101_SOURCE, rules=ALL_RULES)
    assert [(f.code, f.line, f.col) for f in result.findings] == [("GF101", 3, 5)]
    assert result.source == GF101_SOURCE
    assert not result.changed


def test_finding_columns_are_one_based_and_json_ready() -> None:
    finding = lint_source(GF101_SOURCE, rules=ALL_RULES).findings[0]
    data = finding.to_dict("x.py")
    assert data["col"] == 5 and data["end_line"] == 3
    assert data["fix"] == {"safety": "safe", "description": "Use `torch.stack`"}


def test_syntax_error_is_one_line() -> None:
    with pytest.raises(SourceError) as info:
        lint_source("import torch\nx = (\n", rules=ALL_RULES)
    message = str(info.value)
    assert message.startswith("syntax error at line") and "\n" not in message


def test_file_without_torch_has_no_finding() -> None:
    code = "import numpy as np\nw = np.zeros(3)\nw[0] = w[1] / w[2]\nt = tensor([w[0]])\n"
    assert lint_source(code, rules=ALL_RULES).findings == []


def test_crlf_and_comments_are_kept() -> None:
    code = GF101_SOURCE.replace("\n", "\r\n").replace("a[1] * 2])", "a[1] * 2])  # note")
    fixed = lint_source(code, rules=ALL_RULES, fix=True).source
    assert fixed == code.replace("torch.tensor(", "torch.stack(")


def test_crlf_in_generated_block() -> None:
    code = "import torch\r\nw = torch.randn(3, requires_grad=True)\r\nw.normal_()\r\n"
    fixed = lint_source(code, rules=ALL_RULES, fix=True).source
    assert fixed == (
        "import torch\r\nw = torch.randn(3, requires_grad=True)\r\n"
        "with torch.no_grad():\r\n    w.normal_()\r\n"
    )


def test_tab_indentation_is_reused() -> None:
    code = "import torch\ndef f():\n\tw = torch.randn(3, requires_grad=True)\n\tw.zero_()\n"
    fixed = lint_source(code, rules=ALL_RULES, fix=True).source
    assert "\twith torch.no_grad():\n\t\tw.zero_()\n" in fixed


class RenameFoo(Rule):
    """
    ## What it does
    Test rule: renames every call of `foo` to `bar` (nested calls overlap).
    """

    code = "GF998"
    name = "rename-foo"
    message = "test"
    fix_safety = FixSafety.SAFE

    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Name) and node.func.id == "foo":
            fix = self.plan_replace(
                node, lambda e, old: old.with_changes(func=cst.Name("bar")), "r"
            )
            self.report(node, fix=fix)


def test_overlapping_fixes_are_applied_in_later_passes() -> None:
    code = "import torch\nx = foo(foo(foo(1)))  # nested\n"
    result = lint_source(code, rules=[RenameFoo], fix=True)
    assert len(result.findings) == 3
    assert result.source == "import torch\nx = bar(bar(bar(1)))  # nested\n"
    assert result.applied == 3 and result.remaining == []


def test_pass_limit_bounds_the_work() -> None:
    code = "import torch\nx = foo(foo(foo(1)))\n"
    result = lint_source(code, rules=[RenameFoo], fix=True, max_passes=1)
    assert result.source == "import torch\nx = bar(foo(foo(1)))\n"
    assert len(result.remaining) == 2


def test_unsafe_fixes_need_opt_in() -> None:
    code = src(
        """
        import torch
        w = torch.randn(2, requires_grad=True)
        t = torch.tensor([w[0], 1.0])
        """
    )
    safe_only = lint_source(code, rules=ALL_RULES, fix=True)
    assert safe_only.source == code
    assert safe_only.findings[0].fix is not None and safe_only.findings[0].fix.safety == "unsafe"
    unsafe = lint_source(code, rules=ALL_RULES, fix=True, unsafe_fixes=True)
    assert "torch.stack([w[0], torch.as_tensor(1.0)])" in unsafe.source


class BreaksSyntax(Rule):
    """
    ## What it does
    Test rule whose fix produces invalid code.
    """

    code = "GF999"
    name = "breaks-syntax"
    message = "test"
    fix_safety = FixSafety.SAFE

    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Attribute) and node.func.attr == "rand":
            broken = cst.Attribute(cst.Integer("1"), cst.Name("real"))  # `1.real`: invalid
            self.report(node, fix=self.plan_replace(node, lambda e, old: broken, "break"))


def test_fix_that_breaks_syntax_is_dropped() -> None:
    code = "import torch\nx = torch.rand(3)\n"
    result = lint_source(code, rules=[BreaksSyntax], fix=True)
    assert result.source == code
    assert result.dropped and "broke the syntax" in result.dropped[0]


def test_import_is_added_when_file_has_no_torch_alias() -> None:
    code = src(
        '''
        """Docstring."""
        from __future__ import annotations

        # models
        from torch import nn
        w = nn.Parameter(nn.Linear(2, 2).weight.new_ones(2))
        w.zero_()
        '''
    )
    fixed = lint_source(code, rules=[LeafInplace], fix=True).source
    assert fixed.startswith(
        '"""Docstring."""\nfrom __future__ import annotations\n\n'
        "# models\nimport torch\nfrom torch import nn\n"
    )
    assert "with torch.no_grad():\n    w.zero_()\n" in fixed


def test_add_imports_on_file_without_imports() -> None:
    module = add_imports(cst.parse_module("x = 1\n"), ["torch"])
    assert module.code == "import torch\nx = 1\n"


def test_fixing_is_idempotent_on_all_rule_examples() -> None:
    for rule in ALL_RULES:
        for example in rule.INVALID:
            once = lint_source(src(example.code), rules=ALL_RULES, fix=True, unsafe_fixes=True)
            twice = lint_source(once.source, rules=ALL_RULES, fix=True, unsafe_fixes=True)
            assert twice.source == once.source, rule.code


def test_syntax_errors_are_reported_even_when_no_rule_runs() -> None:
    with pytest.raises(SourceError, match=r"syntax error at line 1: .*print"):
        lint_source('print "hi"\n', rules=ALL_RULES)


def test_syntax_error_message_is_pythons() -> None:
    with pytest.raises(SourceError, match=r"^syntax error at line 2: '\(' was never closed$"):
        lint_source("import torch\nx = (\n", rules=ALL_RULES)


def _python_sources() -> list[str]:
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    files = [*root.glob("fixtures/*/*.py"), *root.glob("examples/**/*.py")]
    files += root.glob("tests/data/**/*.py")
    sources = [p.read_text(encoding="utf-8", errors="replace") for p in files]
    for rule in ALL_RULES:
        sources += [textwrap.dedent(case.code) for case in [*rule.VALID, *rule.INVALID]]
    return sources


def test_the_text_gate_keeps_every_file_that_imports_torch() -> None:
    """``active_rules`` runs no rule on text that cannot import torch: it must never skip
    a file the analysis sees importing torch (checked on every source we have)."""
    from gradfix.engine import may_import_torch

    checked = 0
    for source in _python_sources():
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        if Semantic(tree, source).imports_torch():
            assert may_import_torch(source), source[:200]
            checked += 1
    assert checked > 100


@pytest.mark.parametrize(
    ("source", "imports"),
    [
        ("import torch\n", True),
        ("import numpy as np, torch.nn as nn\n", True),
        ("from torch import nn\n", True),
        ("try: import torch\nexcept ImportError: torch = None\n", True),
        ("import os, \\\n    torch\n", True),
        ("from \\\n  torch import nn\n", True),
        ("def f():\n    import torch.nn.functional as F\n", True),
        ('"""Returns torch tensors."""\nimport numpy\n', False),
        ("from transformers import torch_utils\nimport torchvision\n", False),
    ],
)
def test_text_that_cannot_import_torch_is_not_parsed(source: str, imports: bool) -> None:
    from gradfix.engine import may_import_torch

    assert may_import_torch(source) is imports
    assert Semantic(ast.parse(source), source).imports_torch() is imports


def test_parsing_skips_node_validation_only_while_parsing() -> None:
    from pathlib import Path

    from gradfix.engine import parse

    root = Path(__file__).resolve().parents[1]
    for path in sorted(root.glob("fixtures/*/*.py"))[::5]:
        source = path.read_text(encoding="utf-8")
        trusted = parse(source)
        assert trusted.deep_equals(cst.parse_module(source)) and trusted.code == source
    with pytest.raises(cst.CSTValidationError):
        cst.Name("")  # validation is back for every node built after the parse


SHARED = (ast.expr_context, ast.operator, ast.unaryop, ast.boolop, ast.cmpop)


def test_no_rule_keeps_a_file_s_tree_after_its_lint() -> None:
    """A cache on ``ast`` nodes (``functools.cache`` on a function of a node) would keep
    every tree of a batch alive: 430 MB per worker on transformers."""
    import gc
    import weakref
    from pathlib import Path

    from gradfix.engine import FileLint

    root = Path(__file__).resolve().parent.parent
    sources = [p.read_text(encoding="utf-8") for p in sorted(root.glob("fixtures/*/*.before.py"))]
    trees = []
    for source in sources:
        lint = FileLint(source, rules=ALL_RULES, path="m.py")
        lint.fixed(unsafe_fixes=True)
        assert lint.tree is not None
        trees += [  # nodes hold no parent: each one is checked (contexts, operators: shared)
            weakref.ref(node) for node in ast.walk(lint.tree) if not isinstance(node, SHARED)
        ]
        del lint
    gc.collect()
    kept = [type(ref()).__name__ for ref in trees if ref() is not None]
    assert kept == []


def test_a_lint_leaves_no_reference_cycle_behind() -> None:
    """The tree and its analysis are freed by reference counting when a lint ends: a
    cycle (a collector holding its own bound methods) would keep every node of the file
    until the cyclic collector runs, which a run pauses while it lints."""
    import gc

    source = src(
        """
        import torch
        def f(x):
            w = torch.zeros(3, requires_grad=True)
            for i in range(2):
                y = torch.sigmoid(w * x)
                y += 1
            return y
        """
    )
    lint_source(source, rules=ALL_RULES)  # imports and caches made once
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        lint_source(source, rules=ALL_RULES)
        gc.collect()
        kept = [o for o in gc.garbage if isinstance(o, ast.AST) or type(o).__name__ == "Collector"]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert kept == []
