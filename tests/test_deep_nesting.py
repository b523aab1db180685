"""Code CPython compiles but LibCST recurses too deeply on (issue 33, item 6): 500-deep
binary operators, attribute chains, unary operators, nested lists. The findings are
reported without a fix and a one-line note says why; never an internal error."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gradfix.cli import app
from gradfix.engine import lint_source
from gradfix.registry import select_rules

DEPTH = 500
HEAD = "import torch\nw = torch.zeros(3, requires_grad=True)\n"
DEEP = {
    "binary-operators": " + ".join(["1"] * DEPTH),
    "attribute-chain": "w" + ".T" * DEPTH,
    "unary-operators": "-" * DEPTH + "1",
    "nested-lists": "[" * 150 + "1" + "]" * 150,
}
#: where the deep expression is: in the statement the fix rewrites, or after it
PLACES = {
    "in-the-fix": lambda deep: HEAD + f"w.add_({deep})\n",
    "elsewhere": lambda deep: HEAD + f"w.add_(1)\ny = {deep}\n",
}
CASES = [(kind, place) for kind in DEEP for place in PLACES]


def deep_source(kind: str, place: str) -> str:
    source = PLACES[place](DEEP[kind])
    compile(source, "deep.py", "exec")  # CPython takes it
    return source


@pytest.mark.parametrize(("kind", "place"), CASES)
def test_engine_reports_without_a_fix_and_says_why(kind: str, place: str) -> None:
    source = deep_source(kind, place)
    result = lint_source(source, rules=select_rules(["GF201"]), fix=True)
    assert [f.code for f in result.findings] == ["GF201"]
    assert result.source == source
    assert [f.code for f in result.remaining] == ["GF201"]
    assert any("nested too deeply" in note for note in result.dropped), result.dropped


@pytest.mark.parametrize(("kind", "place"), CASES)
@pytest.mark.parametrize("command", [["check"], ["fix", "--write", "--no-verify"]])
def test_cli_has_no_internal_error(
    kind: str, place: str, command: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    source = deep_source(kind, place)
    (tmp_path / "deep.py").write_text(source)
    result = CliRunner().invoke(app, [*command, "--no-cache", "--select", "GF201", "deep.py"])
    assert result.exit_code == 1, result.output  # a finding left, nothing failed
    assert "internal error" not in result.output
    assert "Traceback" not in result.output
    assert "deep.py:3:1: GF201" in result.output
    assert "nested too deeply for LibCST to rewrite" in result.output
    assert (tmp_path / "deep.py").read_text() == source
