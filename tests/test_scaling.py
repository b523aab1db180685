"""Work grows with the findings, not with their square (issue 33, item 8).

The seconds are measured by ``bench/scale.py --repeat``; these tests count the work that
used to be done once per finding over the whole block or file."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

import gradfix.no_grad_block as no_grad_block
from gradfix.cli import app
from gradfix.engine import lint_source
from gradfix.registry import select_rules

N = 60


def repeated_updates(count: int) -> str:
    """``count`` updates through ``.data`` of one leaf, one per line (one fix wraps them)."""
    return "import torch\n\nw = torch.zeros(3, requires_grad=True)\n" + "w.data.add_(1)\n" * count


def counting(monkeypatch: pytest.MonkeyPatch, owner: object, name: str) -> list[int]:
    calls: list[int] = []
    original = getattr(owner, name)

    def counted(*args: object, **kwargs: object) -> object:
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)
    return calls


def test_uses_of_a_tensor_are_searched_once_per_scope(monkeypatch: pytest.MonkeyPatch) -> None:
    searches = counting(monkeypatch, no_grad_block._ReadsAndBackwards, "search")
    result = lint_source(repeated_updates(N), rules=select_rules(["ALL"]), fix=True)
    assert len(result.findings) == N
    assert "with torch.no_grad():" in result.source
    assert len(searches) <= 4  # was one search of the whole module per finding


def test_the_line_of_a_statement_is_found_without_grouping_its_block(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    compared = counting(monkeypatch, no_grad_block.SourceText, "same_line")
    lint_source(repeated_updates(N), rules=select_rules(["ALL"]))
    assert len(compared) <= 10 * N  # was the whole block's lines per finding: N * N


def test_a_fix_shared_by_many_findings_is_shown_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m.py").write_text(repeated_updates(N))
    result = CliRunner().invoke(app, ["check", "--no-cache", "--select", "ALL", "m.py"])
    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()
    assert sum(line.strip() == "-w.data.add_(1)" for line in lines) == N  # was N * N
    assert "(shared with line 4, shown there)" in result.output
    assert len(lines) < 10 * N


def test_notebook_cells_are_numbered_once_per_program(monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    import gradfix.notebook as notebook

    def cell(source: str) -> dict[str, object]:
        return {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": []} | {
            "source": source
        }

    cells = [cell("import torch\nw = torch.zeros(3, requires_grad=True)")]
    cells += [cell("w.data.add_(1)\nprint('step')") for _ in range(N)]
    text = json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5})
    numbered = counting(monkeypatch, notebook, "program_lines")
    lint = notebook.lint_notebook(text, rules=select_rules(["ALL"]), path="m.ipynb", fix=True)
    assert len(lint.findings) == N
    assert len(numbered) <= 10  # was once per finding located: N, then N again after the fix


def test_bench_prints_seconds_per_count(capsys: pytest.CaptureFixture[str]) -> None:
    import importlib.util

    path = Path(__file__).resolve().parent.parent / "bench" / "scale.py"
    spec = importlib.util.spec_from_file_location("bench_scale", path)
    assert spec is not None and spec.loader is not None
    scale = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(scale)
    scale.repeat_rows([2, 3])
    rows = [line.split("|")[1:-1] for line in capsys.readouterr().out.splitlines()[2:]]
    assert [(n.strip(), file.strip(), command.strip()) for n, file, command, _, _ in rows] == [
        (str(n), file, command)
        for n in (2, 3)
        for file in ("m.py", "m.ipynb")
        for command in ("check", "fix")
    ]
