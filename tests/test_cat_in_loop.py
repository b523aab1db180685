"""GF404 cat-in-loop: fix safety per site, report-only loops, loops that are not growth."""

from __future__ import annotations

import textwrap

import pytest

from gradfix.codemods.cat_in_loop import CatInLoop
from gradfix.engine import lint_source


def run(code: str):
    source = "import torch\n" + textwrap.dedent(code).lstrip("\n")
    return lint_source(source, rules=[CatInLoop], fix=True, unsafe_fixes=True)


def only_finding(code: str):
    result = run(code)
    assert [f.code for f in result.findings] == ["GF404"]
    return result.findings[0], result.source


@pytest.mark.parametrize(
    ("start", "loop", "safety"),
    [
        ("out = torch.rand(1, 3)", "for i in range(n):", "safe"),  # a first row
        ("out = torch.tensor([])", "for i in range(3):", "unsafe"),  # float32 promotion
        ("out = torch.Tensor()", "for i in range(3):", "unsafe"),
        ("out = torch.zeros(0, 3)", "for i in range(3):", "unsafe"),
    ],
)
def test_safety_follows_the_start(start: str, loop: str, safety: str) -> None:
    finding, source = only_finding(
        f"n = 4\n{start}\n{loop}\n    out = torch.cat((out, torch.rand(1, 3)))\n"
    )
    assert finding.fix is not None and finding.fix.safety == safety
    assert source.endswith("    out_rows.append(torch.rand(1, 3))\nout = torch.cat(out_rows)\n")


@pytest.mark.parametrize(("loop", "safety"), [("range(3)", "safe"), ("items", "unsafe")])
def test_none_start_is_safe_only_when_the_loop_runs(loop: str, safety: str) -> None:
    finding, source = only_finding(
        f"""
        items = [1, 2]
        out = None
        for i in {loop}:
            if out is not None:
                out = torch.cat((out, torch.rand(1, 3)))
            else:
                out = torch.rand(1, 3)
        """
    )
    assert finding.fix is not None and finding.fix.safety == safety
    assert "out_rows = []\n" in source and "if out" not in source


@pytest.mark.parametrize(
    "code",
    [
        # the start is not a statement of its own right before the loop
        "out = torch.rand(1, 3)\nprint(out)\nfor i in range(3):\n"
        "    out = torch.cat((out, torch.rand(1, 3)))\n",
        "if True:\n    out = torch.rand(1, 3)\nfor i in range(3):\n"
        "    out = torch.cat((out, torch.rand(1, 3)))\n",
        # the loop's else would see the list
        "out = torch.rand(1, 3)\nfor i in range(3):\n    out = torch.cat((out, torch.rand(1, 3)))\n"
        "else:\n    pass\n",
        # the dim changes inside the loop
        "out = torch.rand(1, 1)\nfor i in range(2):\n    d = i\n"
        "    out = torch.cat((out, torch.rand(1, 1)), dim=d)\n",
        # the row is made from the growing tensor
        "out = torch.rand(1, 3)\nfor i in range(3):\n"
        "    out = torch.cat((out, out.new_zeros(1, 3)))\n",
        # None without the first-row branch: the original raises
        "out = None\nfor i in range(3):\n    out = torch.cat((out, torch.rand(1, 3)))\n",
    ],
)
def test_report_without_fix(code: str) -> None:
    finding, source = only_finding(code)
    assert finding.fix is None
    assert "append" not in source


@pytest.mark.parametrize(
    "code",
    [
        # the loop reads the growing tensor: it needs the tensor in every iteration
        "out = torch.rand(1, 3)\nfor i in range(3):\n    print(out.shape)\n"
        "    out = torch.cat((out, torch.rand(1, 3)))\n",
        "out = torch.rand(1, 3)\nwhile out.shape[0] < 5:\n"
        "    out = torch.cat((out, torch.rand(1, 3)))\n",
        # joins two other tensors, or the same one twice
        "a = torch.rand(1, 3)\nfor i in range(3):\n    out = torch.cat((a, torch.rand(1, 3)))\n",
        "out = torch.rand(1, 3)\nfor i in range(3):\n    out = torch.cat((out, out))\n",
        # a local function that happens to be named cat
        "def cat(x, y):\n    return x\nout = 1\nfor i in range(3):\n    out = cat((out, 2))\n",
    ],
)
def test_not_growth_is_not_reported(code: str) -> None:
    assert run(code).findings == []


def test_nested_loops_collect_across_the_outer_loop() -> None:
    _, source = only_finding(
        """
        out = torch.rand(1, 2)
        for a in range(2):
            for b in range(3):
                out = torch.cat((out, torch.full((1, 2), float(a * b))))
        """
    )
    assert source.endswith(
        "out_rows = [torch.rand(1, 2)]\n"
        "for a in range(2):\n"
        "    for b in range(3):\n"
        "        out_rows.append(torch.full((1, 2), float(a * b)))\n"
        "out = torch.cat(out_rows)\n"
    )


def test_reset_in_an_outer_loop_collects_in_the_inner_one() -> None:
    _, source = only_finding(
        """
        for a in range(2):
            out = torch.empty(0)
            for b in range(3):
                out = torch.cat((out, torch.rand(1)))
            print(out)
        """
    )
    assert "    out_rows = []\n    for b in range(3):\n        out_rows.append(" in source
    assert "    out = torch.cat(out_rows)\n    print(out)\n" in source


def test_list_name_does_not_clash() -> None:
    _, source = only_finding(
        """
        out_rows = "taken"
        out = torch.rand(1, 3)
        for i in range(3):
            out = torch.cat([out, torch.rand(1, 3)], 0)
        """
    )
    assert "out_rows2 = [torch.rand(1, 3)]" in source
    assert source.endswith("out = torch.cat(out_rows2, 0)\n")


@pytest.mark.parametrize(
    "code",
    [
        # one selected id per decoding step, through a cast and a name
        "ids = torch.zeros(1, 1, dtype=torch.long)\nfor _ in range(9):\n"
        "    nxt = torch.multinomial(torch.rand(1, 5), 1).long()\n"
        "    ids = torch.cat([ids, nxt], dim=1)\n",
        "ids = torch.zeros(2, 1, dtype=torch.long)\nfor _ in range(9):\n"
        "    ids = torch.cat([ids, torch.rand(2, 5).max(dim=-1, keepdim=True).indices], 1)\n",
        # one gather over a model's parameters, not per batch
        "net = torch.nn.Linear(3, 2)\nflat = torch.tensor([])\n"
        "for name, p in net.named_parameters():\n"
        "    flat = torch.cat((flat, p.detach().flatten()))\n",
    ],
)
def test_cheap_growth_is_not_reported(code: str) -> None:
    assert run(code).findings == []


@pytest.mark.parametrize(
    "code",
    [
        # the values of the selection (not its positions) are real rows
        "out = torch.rand(2, 1)\nfor _ in range(9):\n"
        "    top, _ = torch.rand(2, 5).topk(1)\n    out = torch.cat([out, top], 1)\n",
        # a gather over the parameters on every training step
        "net = torch.nn.Linear(3, 2)\nfor step in range(100):\n    flat = torch.tensor([])\n"
        "    for p in net.parameters():\n        flat = torch.cat((flat, p.flatten()))\n"
        "    flat.abs().sum().backward()\n",
        # ids gathered over a data loader are as many as the data
        "def collect(loader, model):\n    ids = torch.zeros(0, dtype=torch.long)\n"
        "    for x in loader:\n        ids = torch.cat((ids, model(x).argmax(-1)))\n"
        "    return ids\n",
    ],
)
def test_costly_growth_is_still_reported(code: str) -> None:
    assert [f.code for f in run(code).findings] == ["GF404"]
