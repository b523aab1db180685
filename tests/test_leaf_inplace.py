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


# --- one no_grad block for adjacent updates, whatever pass or rule fixed them ---------------


def fixed(code: str, rules: str = "GF1,GF2") -> str:
    from gradfix.registry import select_rules

    source = textwrap.dedent(code).lstrip("\n")
    result = lint_source(source, rules=select_rules([rules]), fix=True, unsafe_fixes=True)
    again = lint_source(result.source, rules=select_rules([rules]), fix=True, unsafe_fixes=True)
    assert again.source == result.source  # idempotent
    return result.source


def test_an_update_fixed_in_a_later_pass_joins_the_block_of_its_neighbour() -> None:
    # pass 1 makes `w` a leaf (GF103) and wraps `b.normal_()`; pass 2 finds `w.normal_()`
    source = fixed(
        """
        import torch
        w = torch.randn(3, requires_grad=True).to("cpu")
        b = torch.zeros(3, requires_grad=True)
        b.normal_()  # init b
        # then w
        w.normal_()
        """
    )
    assert source.endswith(
        "with torch.no_grad():\n    b.normal_()  # init b\n    # then w\n    w.normal_()\n"
    )


def test_updates_fixed_by_two_rules_share_one_block() -> None:
    source = fixed(
        """
        import torch
        w = torch.zeros(3, requires_grad=True)
        b = torch.zeros(3, requires_grad=True)
        w.data.normal_()  # GF205
        b.normal_()  # GF201
        b.data.zero_()
        w.add_(1)
        """
    )
    assert source.count("with torch.no_grad():") == 1
    assert source.endswith(
        "with torch.no_grad():\n"
        "    w.normal_()  # GF205\n"
        "    b.normal_()  # GF201\n"
        "    b.zero_()\n"
        "    w.add_(1)\n"
    )


def test_an_update_next_to_an_existing_block_joins_it() -> None:
    source = fixed(
        """
        import torch as th
        w = th.zeros(3, requires_grad=True)
        b = th.zeros(3, requires_grad=True)
        w.zero_()
        with th.no_grad():  # init
            b.normal_()
            # done with b
        w.add_(1)
        """
    )
    assert source.endswith(
        "with th.no_grad():\n"
        "    w.zero_()\n"
        "    # init\n"
        "    b.normal_()\n"
        "    # done with b\n"
        "    w.add_(1)\n"
    )


def test_other_blocks_and_separated_updates_stay_apart() -> None:
    code = """
        import torch
        w = torch.zeros(3, requires_grad=True)
        with torch.enable_grad():
            pass
        w.zero_()
        with torch.no_grad():
            pass
        print(w)
        w.add_(1)
        with torch.no_grad(): pass
        """
    source = fixed(code)
    assert source.count("with torch.no_grad():") == 3
    assert "with torch.enable_grad():\n    pass\nwith torch.no_grad():\n    w.zero_()\n" in source
    assert "print(w)\nwith torch.no_grad():\n    w.add_(1)\nwith torch.no_grad(): pass\n" in source


def test_blocks_of_two_notebook_cells_stay_apart_and_blocks_in_one_cell_join() -> None:
    """Joining across the cell marker would move code into another cell: the fix used to
    be refused then (a note), with its update left unfixed."""
    import json

    from gradfix.notebook import lint_notebook

    def cell(*lines: str) -> dict[str, object]:
        return {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": []} | {
            "source": list(lines)
        }

    first = cell("import torch\n", "w = torch.zeros(3, requires_grad=True)\n")
    second = cell("w.add_(1)\n", "with torch.no_grad():\n", "    w.zero_()")
    third = cell("w.mul_(2)\n", "print(w)")
    text = json.dumps({"cells": [first, second, third], "metadata": {}, "nbformat": 4})
    result = lint_notebook(text, rules=[LeafInplace], fix=True)
    assert result.dropped == [] and result.remaining == []
    cells = [c["source"] for c in json.loads(result.text)["cells"]]
    assert cells[1:] == [
        ["with torch.no_grad():\n", "    w.add_(1)\n", "    w.zero_()"],
        ["with torch.no_grad():\n", "    w.mul_(2)\n", "print(w)"],
    ]


def test_rows_of_a_leaf_from_list_are_a_graph_use() -> None:
    # list(w) gives rows recorded in w's graph (UnbindBackward) and `r * r` saves them: a
    # no_grad block would only move the error to backward(), so there is no fix.
    result = run(
        """
        import torch
        w = torch.tensor([1., 2.], requires_grad=True)
        loss = sum(r * r for r in list(w))
        w.add_(1)
        loss.backward()
        """
    )
    assert [f.code for f in result.findings] == ["GF201"]
    assert result.findings[0].fix is None


def test_methods_that_change_no_values_are_not_inplace() -> None:
    # pin_memory_ is no tensor method (AttributeError, not an autograd error); the two
    # hand-written lists of such names disagreed on it.
    result = run(
        """
        import torch
        w = torch.tensor([1., 2.], requires_grad=True)
        w.pin_memory_()
        """
    )
    assert result.findings == []


def test_matrix_multiply_assignment_is_no_inplace_change() -> None:
    # `w @= m` rebinds w to `w @ m` (torch.Tensor has no __imatmul__): torch does not raise.
    result = run(
        """
        import torch
        w = torch.randn(3, 3, requires_grad=True)
        w @= torch.eye(3)
        """
    )
    assert result.findings == []


def test_message_shows_the_statement_with_its_semicolon_and_the_target_parentheses() -> None:
    # LibCST printed a small statement with its ``;`` and a target with its parentheses:
    # the ast port reads the same text from the source.
    result = run(
        """
        import torch
        w = torch.zeros(2, requires_grad=True)
        (w).fill_(1.0) ;  x = 1
        """
    )
    assert len(result.findings) == 1 and result.findings[0].fix is None
    assert result.findings[0].message.startswith("In-place `(w).fill_(1.0) ;` on leaf `(w)`")


def test_if_elif_else_of_updates_is_wrapped_whole() -> None:
    result = run(
        """
        import torch
        w = torch.zeros(2, requires_grad=True)
        if flag:
            w.zero_()
        elif other:
            w.fill_(1.0)
        else:
            w.normal_()
        """
    )
    assert len(result.findings) == 3
    assert result.source.count("with torch.no_grad():\n    if flag:\n") == 1


def test_one_line_suite_of_several_updates_is_wrapped_whole() -> None:
    result = run(
        """
        import torch
        net = torch.nn.Linear(2, 2)
        for p in net.parameters(): p.zero_(); p.add_(1)
        """
    )
    assert len(result.findings) == 2
    assert result.source.endswith(
        "with torch.no_grad():\n    for p in net.parameters(): p.zero_(); p.add_(1)\n"
    )


def test_augmented_assignment_with_a_line_continuation_is_reported() -> None:
    # The LibCST rule read the operator's text with its whitespace: ``+= \`` was not ``+=``.
    result = run(
        """
        import torch
        w = torch.zeros(2, requires_grad=True)
        w += \\
            1
        """
    )
    assert len(result.findings) == 1
    # (a continuation line keeps its own indentation: valid inside the new block)
    assert result.source.endswith("with torch.no_grad():\n    w += \\\n    1\n")


def test_index_assignments_in_a_row_share_one_block() -> None:
    # the first `w[0] = ...` changes `w`; it is no graph read that would forbid the second fix
    result = run(
        """
        import torch
        w = torch.zeros(3, requires_grad=True)
        w[0] = 1.0
        w[1:] -= 2.0
        """
    )
    assert [f.fix is not None for f in result.findings] == [True, True]
    assert result.source == textwrap.dedent(
        """\
        import torch
        w = torch.zeros(3, requires_grad=True)
        with torch.no_grad():
            w[0] = 1.0
            w[1:] -= 2.0
        """
    )
