"""bench/tutorials.py: export at a pinned commit, key findings by their line's text, tell
unjudged findings apart."""

from __future__ import annotations

import importlib
import json
import subprocess
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
SCRIPT = "import torch\nw = torch.ones(3, requires_grad=True)\nprint(torch.tensor(w))\n"
NOTEBOOK = {
    "cells": [
        {"cell_type": "markdown", "source": ["# title"]},
        {"cell_type": "code", "source": ["import torch\n", "x = torch.ones(2)\n", "y = x"]},
    ]
}


@pytest.fixture
def tutorials(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(BENCH))
    return importlib.import_module("tutorials")


def git(*args: str, cwd: Path) -> str:
    identity = ["-c", "user.name=t", "-c", "user.email=t@t"]
    done = subprocess.run(["git", *identity, *args], cwd=cwd, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_export_reads_the_pinned_commit_and_keys_lines_by_text(
    tutorials: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = tmp_path / "work"
    (work / "sub").mkdir(parents=True)
    (work / "sub" / "train.py").write_text(SCRIPT)
    (work / "demo.ipynb").write_text(json.dumps(NOTEBOOK))
    (work / "README.md").write_text("not exported")
    git("init", "-q", cwd=work)
    git("add", ".", cwd=work)
    git("commit", "-qm", "pinned", cwd=work)
    pinned = git("rev-parse", "HEAD", cwd=work)
    (work / "sub" / "train.py").write_text("changed after the pin\n")
    git("commit", "-qam", "later", cwd=work)
    mirrors = tmp_path / "mirrors" / "owner+name"
    mirrors.mkdir(parents=True)
    git("clone", "-q", "--bare", str(work), str(mirrors / "repo"), cwd=tmp_path)
    monkeypatch.setenv("GRADFIX_MIRRORS", str(tmp_path / "mirrors"))

    exported = tutorials.export("owner/name", pinned, tmp_path / "cache")
    assert sorted(p.name for p in exported.rglob("*") if p.is_file()) == ["demo.ipynb", "train.py"]
    assert (exported / "sub" / "train.py").read_text() == SCRIPT
    assert tutorials.source_line(exported / "sub" / "train.py", 3, None) == "print(torch.tensor(w))"
    assert tutorials.source_line(exported / "demo.ipynb", 3, 2) == "y = x"
    assert tutorials.export("owner/missing", pinned, tmp_path / "cache") is None


def test_report_counts_verdicts_and_returns_the_unjudged(
    tutorials: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    judged_one = tutorials.Finding("o/r", "a.py", "GF101", "x = torch.tensor(w)", 3, None)
    moved = tutorials.Finding("o/r", "a.py", "GF101", "x = torch.tensor(w)", 9, None)  # same text
    new = tutorials.Finding("o/r", "b.py", "GF404", "out = torch.cat((out, r))", 5, None)
    judged = {judged_one.key: {"verdict": "false", "reason": "r"}}
    unjudged = tutorials.report([judged_one, moved, new], judged, ["o/r", "o/empty"])
    assert unjudged == [new]
    table = capsys.readouterr().out
    assert "| GF101 | 2 | 0 | 2 | 0 | 0 |" in table
    assert "| GF404 | 1 | 0 | 0 | 0 | 1 |" in table
    assert "| o/empty | 0 | 0 | 0 | 0 | 0 |" in table
