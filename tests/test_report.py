"""Migration reports: ``--report FILE`` in .json, .md and .html."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gradfix.cli import app

BUGGY = (
    "import torch\nw = torch.randn(3, requires_grad=True)\nw.normal_()\n(w * w).sum().backward()\n"
)


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "a.py").write_text(BUGGY, encoding="utf-8")
    (tmp_path / "clean.py").write_text("import torch\n", encoding="utf-8")
    return tmp_path


def test_json_report_of_a_fix_run(tree: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    code, _, _ = invoke("fix", "--write", "--no-verify", "--report", str(out), str(tree))
    assert code == 0
    data = json.loads(out.read_text(encoding="utf-8"))
    totals = data["totals"]
    assert totals["files"] == 2 and totals["findings"] == 1 and totals["fixed"] == 1
    assert totals["by_rule"] == {"GF201": 1}
    [entry] = data["files"]
    assert entry["written"] and "+    w.normal_()" in entry["diff"]
    assert entry["findings"][0]["code"] == "GF201"


def test_markdown_and_html_reports(tree: Path, tmp_path: Path) -> None:
    md, page = tmp_path / "r.md", tmp_path / "r.html"
    invoke("fix", "--report", str(md), str(tree))
    text = md.read_text(encoding="utf-8")
    assert text.startswith("# gradfix migration report")
    assert "| GF201 | 1 |" in text and "```diff" in text
    invoke("check", "--report", str(page), str(tree))
    html = page.read_text(encoding="utf-8")
    assert "<code>GF201</code>" in html and "&lt;" not in html.split("<body>")[0]


def test_report_with_verdicts(tree: Path, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    out = tmp_path / "report.json"
    invoke("fix", "--verify", "--report", str(out), str(tree))
    data = json.loads(out.read_text(encoding="utf-8"))
    assert data["totals"]["by_verdict"] == {"verified": 1}
    finding = data["files"][0]["findings"][0]
    assert finding["verdict"] == "verified" and "tolerances" in finding["evidence"]


def test_bad_report_suffix(tree: Path, tmp_path: Path) -> None:
    code, _, err = invoke("check", "--report", str(tmp_path / "r.txt"), str(tree))
    assert code == 2 and "the suffix must be one of .json, .md, .html" in err
