"""GF106 nonleaf-grad-read: cases beyond the embedded examples and fixtures."""

from __future__ import annotations

import textwrap

from gradfix.codemods.nonleaf_grad_read import NonleafGradRead
from gradfix.engine import LintResult, lint_source


def run(code: str) -> LintResult:
    return lint_source(textwrap.dedent(code).lstrip("\n"), rules=[NonleafGradRead], fix=True)


def test_a_binding_sharing_its_line_is_reported_without_a_fix() -> None:
    # The ast has no lines: the fix builder sees ``b = ...; c = ...`` and offers nothing.
    result = run(
        """
        import torch
        a = torch.tensor([3.0], requires_grad=True)
        b = a * a; c = a * 3
        d = a * 4
        (b + c + d).sum().backward()
        print(b.grad, c.grad, d.grad)
        """
    )
    assert [f.fix is None for f in result.findings] == [True, True, False]
    assert "d = a * 4\nd.retain_grad()\n(b + c" in result.source
    assert "b = a * a; c = a * 3\n" in result.source


def test_writes_and_deletes_of_grad_are_not_reads() -> None:
    result = run(
        """
        import torch
        a = torch.tensor([3.0], requires_grad=True)
        b = a * a
        b.sum().backward()
        b.grad = None
        b.grad += 1
        del b.grad
        print(b.grad)
        """
    )
    assert [f.line for f in result.findings] == [8]


def test_grad_assigned_by_unpacking_or_a_loop_is_not_a_read() -> None:
    # LibCST's rule only knew ``b.grad = ...``, ``+=`` and ``del`` as writes.
    result = run(
        """
        import torch
        a = torch.tensor([3.0], requires_grad=True)
        b = a * a
        b.sum().backward()
        x, b.grad = 1, None
        for b.grad in [None]:
            pass
        b.grad: torch.Tensor = None
        """
    )
    assert result.findings == []
