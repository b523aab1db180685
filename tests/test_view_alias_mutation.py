"""GF206 view-alias-mutation: cases beyond the embedded examples and fixtures."""

from __future__ import annotations

import textwrap

from gradfix.codemods.view_alias_mutation import ViewAliasMutation
from gradfix.engine import lint_source


def run(code: str, unsafe: bool = True):
    source = textwrap.dedent(code).lstrip("\n")
    return lint_source(source, rules=[ViewAliasMutation], fix=True, unsafe_fixes=unsafe)


def test_seed_shape_with_base_read_after_is_report_only() -> None:
    result = run(
        """
        import torch
        v1 = torch.nn.Parameter(torch.rand(10))
        a = v1[:4]
        a.data.copy_(torch.rand(4))
        print(v1)
        """
    )
    assert len(result.findings) == 1 and result.findings[0].fix is None
    assert "changes `v1` too" in result.findings[0].message
    assert "v1[:4].clone()" in result.findings[0].message


def test_raising_change_with_base_read_after_is_an_unsafe_fix() -> None:
    code = """
        import torch
        w = torch.randn(4, requires_grad=True)
        a = w[1:]
        a += 1
        print(w)
        """
    result = run(code)
    assert result.findings[0].fix.safety == "unsafe"
    assert "torch.no_grad()" in result.findings[0].message
    assert run(code, unsafe=False).source == textwrap.dedent(code).lstrip("\n")


def test_function_argument_base_counts_as_read() -> None:
    # the caller holds w: the clone is the likely intent, but not a proven one
    result = run(
        """
        import torch

        def shift(w: torch.nn.Parameter):
            a = w[:2]
            a.add_(1)
            return a
        """
    )
    assert len(result.findings) == 1 and result.findings[0].fix.safety == "unsafe"


def test_data_changes_of_parameters_on_purpose_are_not_reported() -> None:
    result = run(
        """
        import torch
        from torch import nn

        def shrink(model: nn.Module, w: nn.Parameter):
            for p in model.parameters():
                row = p[0]
                row.data.mul_(0.5)
            head = w[:2]
            head.data.zero_()
            with torch.no_grad():
                tail = w[2:]
                tail.fill_(1.0)
        """
    )
    assert result.findings == []


def test_views_of_plain_tensors_and_tensor_indices_are_not_reported() -> None:
    result = run(
        """
        import torch
        w = torch.nn.Parameter(torch.rand(5))
        idx = torch.tensor([0, 2])
        picked = w[idx]  # advanced indexing copies
        picked.data.mul_(2)
        x = torch.rand(5)
        head = x[:2]
        head.zero_()
        """
    )
    assert result.findings == []


def test_every_augmented_assignment_changes_the_view() -> None:
    # `a %= 2` calls `__imod__`; the prefilter used to list only `+= -= *= /=`.
    result = run(
        """
        import torch
        w = torch.randn(4, requires_grad=True)
        a = w[1:]
        a %= 2
        print(w)
        """
    )
    assert [f.code for f in result.findings] == ["GF206"]


def test_message_quotes_the_parentheses_of_the_view() -> None:
    """LibCST printed a parenthesized value with its parentheses: the ast port too."""
    result = run(
        """
        import torch
        w = torch.randn(3, 4, requires_grad=True)
        a = (w[:2])
        a.zero_()
        """
    )
    assert len(result.findings) == 1
    assert "use `a = (w[:2]).clone()`" in result.findings[0].message
    assert "a = (w[:2]).clone()\n" in result.source


def test_parenthesized_tuple_index_is_not_a_view() -> None:
    """``w[(0, 1)]`` is one index (advanced indexing copies); ``w[0, 1]`` two (a view)."""
    result = run(
        """
        import torch
        w = torch.randn(3, 4, requires_grad=True)
        c = w[(0, 1)]
        c.add_(1)
        d = w[0, 1]
        d.add_(1)
        """
    )
    assert [f.message.split("`")[1] for f in result.findings] == ["d"]
