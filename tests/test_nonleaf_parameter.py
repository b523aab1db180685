"""GF103 nonleaf-parameter: cases beyond the embedded examples and fixtures."""

from __future__ import annotations

import textwrap

from gradfix.codemods import ALL_RULES
from gradfix.codemods.nonleaf_parameter import NonleafParameter
from gradfix.engine import LintResult, lint_source


def run(code: str, unsafe: bool = False) -> LintResult:
    source = textwrap.dedent(code).lstrip("\n")
    return lint_source(source, rules=[NonleafParameter], fix=True, unsafe_fixes=unsafe)


def test_value_changing_ops_are_unsafe_fixes() -> None:
    # The gradient moves from the randn leaf to the scaled tensor: 100x for * 0.01.
    code = """
        import torch
        w = torch.randn(3, 4, requires_grad=True) * 0.01
        t = torch.randn(12, 1, requires_grad=True).view(3, 4)
        """
    safe_only = run(code)
    assert [f.fix.safety for f in safe_only.findings if f.fix] == ["unsafe", "unsafe"]
    assert not safe_only.changed
    fixed = run(code, unsafe=True).source
    assert "w = (torch.randn(3, 4) * 0.01).requires_grad_()\n" in fixed
    assert "t = torch.randn(12, 1).view(3, 4).requires_grad_()\n" in fixed


def test_multiline_chain_and_marked_leaf() -> None:
    result = run(
        """
        import torch
        w = (
            torch.randn(3, 4, requires_grad=True)  # init
            * 0.01
        )
        v = torch.empty(3).normal_().requires_grad_().t()
        """,
        unsafe=True,
    )
    assert "w = (\n    torch.randn(3, 4)  # init\n    * 0.01\n).requires_grad_()\n" in result.source
    assert "v = torch.empty(3).normal_().t().requires_grad_()\n" in result.source


def test_returned_parameter_and_aliased_import() -> None:
    result = run(
        """
        import torch
        from torch.nn import Parameter

        def make(n, device):
            return Parameter(torch.randn(n) / n).to(device)
        """
    )
    assert "return Parameter((torch.randn(n) / n).to(device))\n" in result.source


def test_unknown_to_argument_keeps_the_op_and_marks_the_leaf() -> None:
    result = run(
        """
        import torch
        target = torch.zeros(1, dtype=torch.float64)
        w = torch.randn(3, requires_grad=True).to(target)
        """
    )
    assert "w = torch.randn(3).to(target).requires_grad_()\n" in result.source


def test_module_attribute_message_says_not_registered() -> None:
    result = run(
        """
        import torch
        from torch import nn

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.w = torch.randn(3, requires_grad=True).to("cpu")
                self.b = torch.zeros(3).requires_grad_() * 0.5
        """,
        unsafe=True,
    )
    assert "not registered as a parameter" in result.findings[0].message
    assert {f.fix.safety for f in result.findings if f.fix} == {"unsafe"}
    assert 'self.w = nn.Parameter(torch.randn(3).to("cpu"))\n' in result.source
    assert "self.b = nn.Parameter(torch.zeros(3) * 0.5)\n" in result.source


def test_not_reported() -> None:
    result = run(
        """
        import torch
        from torch import nn
        device = "cpu"
        model = nn.Linear(3, 4).to(device)
        x = torch.randn(2, 3, requires_grad=False).to(device)
        w0 = torch.randn(3, requires_grad=True)
        w = w0 * 0.01  # the leaf is kept in w0
        p = torch.randn(3, requires_grad=True) * w0  # two trained tensors
        e = torch.empty(3, requires_grad=True).normal_()  # GF201
        f = torch.randn(3, requires_grad=True).float().cpu()
        """
    )
    assert result.findings == []


def test_other_rules_leave_the_site_to_gf103() -> None:
    source = textwrap.dedent(
        """
        import torch
        w = torch.randn(3, requires_grad=True).double()
        w.sum().backward()
        print(w.grad)
        """
    )
    result = lint_source(source, rules=ALL_RULES, fix=True)
    assert [f.code for f in result.findings] == ["GF103"]
    assert "w = torch.randn(3, dtype=torch.float64, requires_grad=True)\n" in result.source


def test_lists_appends_and_computations() -> None:
    result = run(
        """
        import torch
        ws = [torch.randn(4, 4, requires_grad=True) / 2 for _ in range(3)]
        params = []
        params.append(torch.zeros(4, requires_grad=True).double())
        total = torch.randn(3, requires_grad=True).sum()
        """,
        unsafe=True,
    )
    assert [f.line for f in result.findings] == [2, 4, 5]
    assert [f.fix is None for f in result.findings] == [False, False, True]
    assert "ws = [(torch.randn(4, 4) / 2).requires_grad_() for _ in range(3)]" in result.source
    assert "params.append(torch.zeros(4, dtype=torch.float64, requires_grad=True))" in result.source


def test_only_one_string_literal_is_a_device() -> None:
    # LibCST's SimpleString: ``"cu" "da"`` is a concatenation, not folded into ``device=``.
    result = run(
        """
        import torch
        a = torch.zeros(3, requires_grad=True).to("cuda")
        b = torch.zeros(3, requires_grad=True).to("cu" "da")
        """
    )
    assert 'a = torch.zeros(3, device="cuda", requires_grad=True)\n' in result.source
    assert 'b = torch.zeros(3).to("cu" "da").requires_grad_()\n' in result.source
