"""GF101, GF104, GF303, GF404 on `ast`: the layouts where `ast` and LibCST disagree (a
parenthesised tuple's range, argument order, one-line suites, names that `ast` keeps as
strings) give the findings and fixes the LibCST rules gave."""

from __future__ import annotations

import textwrap

from gradfix.codemods.cat_in_loop import CatInLoop
from gradfix.codemods.sqrt_of_squares import SqrtOfSquares
from gradfix.codemods.tensor_copy_construct import TensorCopyConstruct
from gradfix.codemods.tensor_from_tensors import TensorFromTensors
from gradfix.engine import lint_source


def run(rule: type, code: str):
    source = "import torch\n" + textwrap.dedent(code).lstrip("\n")
    return lint_source(source, rules=[rule], fix=True, unsafe_fixes=True)


def test_sqrt_norm_keeps_a_tuple_of_dims() -> None:
    result = run(
        SqrtOfSquares,
        """
        w = torch.randn(3, 4, requires_grad=True)
        n = torch.sqrt(torch.sum(w ** 2, dim=(0, 1)))
        """,
    )
    assert [f.fix is not None for f in result.findings] == [True]
    assert "n = torch.linalg.vector_norm(w, dim=(0, 1))\n" in result.source


def test_tensor_from_tensors_keyword_before_unpacked_data_is_not_read_as_data() -> None:
    result = run(
        TensorFromTensors,
        """
        w = torch.randn(2, requires_grad=True)
        b = [w[0], w[1]]
        t = torch.tensor(dtype=torch.float32, *b)
        """,
    )
    assert result.findings == []


def test_copy_guard_matches_the_argument_with_its_parentheses() -> None:
    code = """
        x = torch.rand(3)
        if not torch.is_tensor({checked}):
            y = torch.tensor({copied})
        """
    assert run(TensorCopyConstruct, code.format(checked="(x)", copied="(x)")).findings == []
    assert run(TensorCopyConstruct, code.format(checked="x", copied="x")).findings == []
    found = run(TensorCopyConstruct, code.format(checked="(x)", copied="x")).findings
    assert [f.code for f in found] == ["GF104"]


def test_cat_in_loop_names_declared_in_the_loop_are_reads() -> None:
    for declaration in ("def out(): pass", "global out", "import out"):
        result = run(
            CatInLoop,
            f"""
            def f():
                out = torch.rand(1, 3)
                for i in range(3):
                    {declaration}
                    out = torch.cat((out, torch.rand(1, 3)))
            """,
        )
        assert result.findings == [], declaration


def test_cat_in_loop_list_name_avoids_imported_and_defined_names() -> None:
    result = run(
        CatInLoop,
        """
        import out_rows.sub

        def out_rows2(): pass

        out = torch.rand(1, 3)
        for i in range(3):
            out = torch.cat((out, torch.rand(1, 3)))
        """,
    )
    assert "out_rows3 = [torch.rand(1, 3)]\n" in result.source


def test_cat_in_loop_first_row_branch_on_one_line() -> None:
    start = "out = None\nfor i in range(3):\n    r = torch.rand(1, 3)  # é\n"
    cat_on_else_line = "    if out is None:\n        out = r\n    else: out = torch.cat((out, r))\n"
    result = run(CatInLoop, start + cat_on_else_line)
    assert result.source.endswith("    out_rows.append(r)\nout = torch.cat(out_rows)\n")
    # ``if out is not None: out = torch.cat(...)`` on one line was never taken for the
    # first-row branch: its test reads ``out``, so the loop is not reported
    cat_on_if_line = (
        "    if out is not None: out = torch.cat((out, r))\n    else:\n        out = r\n"
    )
    result = run(CatInLoop, start + cat_on_if_line)
    assert result.findings == []


def test_cat_in_loop_start_sharing_a_line_has_no_fix() -> None:
    result = run(
        CatInLoop,
        """
        a = 1; out = torch.rand(1, 3)
        for i in range(3):
            out = torch.cat((out, torch.rand(1, 3)))
        """,
    )
    assert [f.fix for f in result.findings] == [None]
