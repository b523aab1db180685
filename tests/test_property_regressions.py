"""Bugs found by the property-based tests (tests/test_properties.py), one test each."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from gradfix.engine import LintResult, lint_source
from gradfix.registry import find_rule
from gradfix.rule import (
    Edit,
    Fix,
    FixSafety,
    keeping_comments,
    missing_comments,
)


def _fix(code: str, rule_code: str) -> LintResult:
    source = textwrap.dedent(code).lstrip("\n")
    return lint_source(source, rules=[find_rule(rule_code)], fix=True, unsafe_fixes=True)


def test_spaces_inside_brackets_keep_the_fix() -> None:
    # GF203 compared `x[ i ]` with `x[i]` as text: formatting cost the finding its fix
    result = _fix(
        """
        import torch
        logits = torch.randn(4, 5, requires_grad=True)
        x = torch.exp(logits)
        for i in range(4):
            x[ i ] = x[ i ] / x[ i ].sum()
        x.sum().backward()
        """,
        "GF203",
    )
    assert [f.fix is not None for f in result.findings] == [True]
    assert "torch.stack" in result.source


def test_functions_nested_in_a_method_are_analysed() -> None:
    # a script wrapped in a method: its functions were taken for methods, so the tensor
    # passed at their call site (it requires grad) was not seen
    result = _fix(
        """
        import torch
        class Script:
            def run(self):
                def norm(v):
                    return torch.sqrt((v ** 2).sum())
                norm(torch.zeros(3, requires_grad=True))
        """,
        "GF303",
    )
    assert [f.code for f in result.findings] == ["GF303"]
    assert "torch.linalg.vector_norm(v)" in result.source


def test_parameter_fix_uses_the_files_name_of_nn() -> None:
    # GF103 looked for the name `nn` only: after `from torch import nn as tnn` its fix
    # spelled `torch.nn.Parameter`, after `from torch import nn` `nn.Parameter`
    result = _fix(
        """
        import torch
        from torch import nn as tnn
        class Gate(tnn.Module):
            def __init__(self):
                super().__init__()
                self.gate = torch.zeros(3, requires_grad=True) + 0.1
        """,
        "GF103",
    )
    assert "self.gate = tnn.Parameter(torch.zeros(3) + 0.1)" in result.source


def test_device_is_recognised_by_its_binding_not_its_name() -> None:
    # GF103 knew `.to(device)` by the variable's name: renamed, `.to(dev)` got another fix
    result = _fix(
        """
        import torch
        dev = torch.device("cpu")
        b = torch.zeros(3, requires_grad=True).to(dev)
        """,
        "GF103",
    )
    assert "b = torch.zeros(3, device=dev, requires_grad=True)" in result.source


def test_a_rebuilt_expression_keeps_its_comments() -> None:
    # GF303 rebuilt `w.pow(2).sum(  # per row` ... from its parts and dropped the comment
    result = _fix(
        """
        import torch
        w = torch.randn(3, 2, requires_grad=True)
        m = w.pow(2).sum(  # per row
            1, keepdim=True) ** 0.5
        """,
        "GF303",
    )
    assert result.source.endswith(
        "m = torch.linalg.vector_norm(  # per row\n    w, dim=1, keepdim=True)\n"
    )


def test_comments_a_fix_would_delete_are_carried_or_the_fix_dropped() -> None:
    module = cst.parse_module("x = f(  # why\n    1)\n")
    statement = module.body[0]
    call = cst.ensure_type(cst.ensure_type(statement, cst.SimpleStatementLine).body[0], cst.Assign)
    rebuilt = Fix((Edit(call.value, cst.parse_expression("g(1)")),), FixSafety.SAFE, "g")
    assert missing_comments(rebuilt) == ["# why"]
    carried = keeping_comments(rebuilt)
    assert carried is not None and missing_comments(carried) == []
    new = cst.ensure_type(carried.edits[0].replacement, cst.CSTNode)
    assert cst.Module([]).code_for_node(new) == "g(  # why\n    1)"
    removed = Fix((Edit(statement, cst.RemovalSentinel.REMOVE),), FixSafety.SAFE, "drop")
    assert keeping_comments(removed) is None
    statement_fix = Fix((Edit(statement, cst.parse_statement("x = 1\n")),), FixSafety.SAFE, "1")
    kept = keeping_comments(statement_fix)
    assert kept is not None
    new = cst.ensure_type(kept.edits[0].replacement, cst.CSTNode)
    assert cst.Module([new]).code == "# why\nx = 1\n"  # type: ignore[list-item]


def test_a_copy_construct_with_a_comment_inside_keeps_its_fix() -> None:
    # GF104 withheld its fix when a comment sat after `torch.tensor(`: now it moves
    result = _fix(
        """
        import torch
        x = torch.randn(3, requires_grad=True)
        target = torch.tensor(  # frozen copy
            x * 2)
        """,
        "GF104",
    )
    assert result.source.endswith("target = (  # frozen copy\n    (x * 2).detach().clone())\n")


@pytest.mark.parametrize(
    ("rule_code", "code"),
    [
        # aligned `=`: the prefilter looked for the text "] =" and skipped the file
        ("GF203", "for q in range(len(s)):\n    s[q]  =  s[q] / s[q].sum()\n"),
        ("GF203", "for q in range(len(s)):\n    (s[q]) = s[q] / s[q].sum()\n"),
        ("GF203", "for q in range(len(s)):\n    s[q] \\\n        = s[q] / s[q].sum()\n"),
        # `** .5` is a square root too: the prefilter knew only "** 0.5" and "**0.5"
        ("GF303", "n = (s ** 2).sum() ** .5\n"),
    ],
)
def test_layout_never_hides_a_finding(rule_code: str, code: str) -> None:
    source = "import torch\ns = torch.exp(torch.randn(3, 4, requires_grad=True))\n" + code
    result = lint_source(source, rules=[find_rule(rule_code)])
    assert [f.code for f in result.findings] == [rule_code]
