"""GF201 leaf-inplace: cases beyond the embedded examples and fixtures."""

from __future__ import annotations

import textwrap

from gradfix.codemods.leaf_inplace import LeafInplace
from gradfix.engine import lint_source


def run(code: str, fix: bool = True):
    return lint_source(textwrap.dedent(code).lstrip("\n"), rules=[LeafInplace], fix=fix)


def test_update_after_graph_use_without_backward_is_reported_without_fix() -> None:
    # Seed 004: w is used by the graph, then changed before backward(): no_grad would only
    # move the error to backward time (or corrupt the gradient), so there is no fix.
    result = run(
        """
        import torch
        w = torch.tensor([1.], requires_grad=True)
        x = torch.tensor([2.], requires_grad=True)
        y = torch.mul(torch.add(w, x), torch.add(w, 1))
        w.add_(1)
        y.backward()
        """
    )
    assert [f.code for f in result.findings] == ["GF201"]
    assert result.findings[0].fix is None
    assert "used in the graph before" in result.findings[0].message
    assert not result.changed


def test_update_after_backward_is_fixed() -> None:
    result = run(
        """
        import torch
        w = torch.tensor([1.], requires_grad=True)
        loss = (w * 3).sum()
        loss.backward()
        w.sub_(0.1 * w.grad)
        """
    )
    assert result.findings[0].fix is not None
    assert "with torch.no_grad():\n    w.sub_(0.1 * w.grad)\n" in result.source


def test_one_line_loop_is_wrapped_whole() -> None:
    result = run(
        """
        import torch
        net = torch.nn.Linear(2, 2)
        for p in net.parameters(): p.zero_()
        """
    )
    assert result.source.endswith(
        "with torch.no_grad():\n    for p in net.parameters(): p.zero_()\n"
    )


def test_statement_sharing_a_line_is_reported_without_fix() -> None:
    result = run(
        """
        import torch
        w = torch.zeros(2, requires_grad=True)
        w.fill_(1.0); y = w * 2
        """
    )
    assert len(result.findings) == 1 and result.findings[0].fix is None


def test_chained_inplace_and_views_of_leaves() -> None:
    result = run(
        """
        import torch
        w = torch.zeros(4, requires_grad=True)
        w.normal_().mul_(0.1)
        w[0] += 1.0
        """
    )
    assert len(result.findings) == 2
    assert "with torch.no_grad():\n    w.normal_().mul_(0.1)\n    w[0] += 1.0\n" in result.source


def test_layer_weight_in_a_training_script() -> None:
    result = run(
        """
        import torch.nn as nn
        layer = nn.Linear(3, 3)
        layer.weight.fill_(0.5)  # start from a constant
        """
    )
    assert result.source == (
        "import torch\nimport torch.nn as nn\nlayer = nn.Linear(3, 3)\n"
        "with torch.no_grad():\n    layer.weight.fill_(0.5)  # start from a constant\n"
    )


def test_parameter_of_unknown_module_is_not_reported() -> None:
    # ``module`` could be anything (and HF-style init functions run under no_grad).
    result = run(
        """
        import torch
        def init(module):
            module.weight.normal_(0.0, 0.02)
        """,
        fix=False,
    )
    assert result.findings == []


def test_nested_function_is_not_in_outer_no_grad() -> None:
    result = run(
        """
        import torch
        w = torch.zeros(2, requires_grad=True)
        with torch.no_grad():
            def later():
                w.add_(1)
        later()
        """,
        fix=False,
    )
    assert [f.code for f in result.findings] == ["GF201"]


def test_update_through_data_is_left_to_gf205() -> None:
    # ``w.data.normal_()`` runs without error: not GF201's pitfall, but GF205's (off by
    # default), which rewrites it to the ``no_grad`` form GF201 produces.
    source = "import torch\nw = torch.randn(3, requires_grad=True)\nw.data.normal_()\n"
    assert run(source).findings == []
