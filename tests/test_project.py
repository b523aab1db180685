"""Findings that depend on the other files of the run (``gradfix.project``): a function
that only other files call, all of them under ``no_grad``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gradfix.registry import select_rules
from gradfix.runner import RunOptions, process_paths

MODEL = """\
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.head = nn.Linear(4, 4)

    def generate(self, x):
        scores = torch.sigmoid(self.head(x))
        keep = (scores > 0.5).float()
        scores *= keep  # in place on the output sigmoid saved
        return scores
"""

NO_GRAD_CALLERS = """\
import torch
from model import Model


@torch.no_grad()
def test(x):
    model = Model().eval()
    return model.generate(x)


def sample(x):
    model = Model()
    with torch.no_grad():
        out = model.generate(x)
    return out
"""

GRAD_CALLER = """\


def train(x):
    return Model().generate(x).sum()
"""


def project(tmp_path: Path, **files: str) -> Path:
    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    return tmp_path


def codes(root: Path, *paths: str, **options: object) -> dict[str, list[str]]:
    run = process_paths(
        [str(root / p) for p in paths] or [str(root)],
        RunOptions(rules=select_rules(), **options),  # type: ignore[arg-type]
    )
    assert not [r.error for r in run.files if r.error]
    return {Path(r.path).name: [f.code for f in r.findings] for r in run.files}


def test_a_function_only_called_under_no_grad_from_other_files_is_not_reported(
    tmp_path: Path,
) -> None:
    root = project(tmp_path, **{"model.py": MODEL, "main.py": NO_GRAD_CALLERS})
    assert codes(root, "model.py") == {"model.py": ["GF204"]}  # alone: its callers unknown
    assert codes(root) == {"main.py": [], "model.py": []}


def test_one_caller_with_grad_on_keeps_the_finding(tmp_path: Path) -> None:
    root = project(tmp_path, **{"model.py": MODEL, "main.py": NO_GRAD_CALLERS + GRAD_CALLER})
    assert codes(root)["model.py"] == ["GF204"]


def test_a_notebook_caller_cannot_be_told_and_keeps_the_finding(tmp_path: Path) -> None:
    cell = {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None}
    notebook = {
        "cells": [{**cell, "source": ["from model import Model\n", "Model().generate(x)\n"]}],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    root = project(
        tmp_path,
        **{"model.py": MODEL, "main.py": NO_GRAD_CALLERS, "use.ipynb": json.dumps(notebook)},
    )
    assert codes(root)["model.py"] == ["GF204"]


def test_fix_and_the_cache_agree_with_check(tmp_path: Path) -> None:
    root = project(tmp_path, **{"model.py": MODEL, "main.py": NO_GRAD_CALLERS})
    cache = str(tmp_path / "cache")
    assert codes(root, cache_dir=cache)["model.py"] == []
    assert codes(root, cache_dir=cache)["model.py"] == []  # warm: the same
    run = process_paths([str(root)], RunOptions(rules=select_rules(), fix=True, unsafe_fixes=True))
    assert all(not r.changed for r in run.files)  # nothing the check does not report


@pytest.mark.parametrize(
    "caller",
    [
        "def go(m, x):\n    return m.generate(x)\n",  # grad on
        "import torch\n"
        "def go(m, x):\n    with torch.enable_grad():\n        return m.generate(x)\n",
    ],
)
def test_callers_with_grad_on_in_any_shape(tmp_path: Path, caller: str) -> None:
    root = project(tmp_path, **{"model.py": MODEL, "main.py": NO_GRAD_CALLERS, "go.py": caller})
    assert codes(root)["model.py"] == ["GF204"]


def test_a_chapter_calling_its_own_model_is_not_a_caller(tmp_path: Path) -> None:
    """A repository of one program per directory, each with its ``model.py``."""
    (tmp_path / "ch1").mkdir()
    (tmp_path / "ch2").mkdir()
    project(tmp_path / "ch1", **{"model.py": MODEL, "main.py": NO_GRAD_CALLERS})
    project(tmp_path / "ch2", **{"model.py": "def generate(x):\n    return x\n"})
    project(tmp_path / "ch2", **{"main.py": "from model import generate\n" + GRAD_CALLER})
    assert codes(tmp_path)["model.py"] == []  # ch1's: ch2's main calls its own generate


def test_an_importer_elsewhere_in_the_project_is_a_caller(tmp_path: Path) -> None:
    """``models/`` without ``__init__.py``, imported from the root as ``models.net``."""
    (tmp_path / "models").mkdir()
    project(tmp_path / "models", **{"net.py": MODEL, "infer.py": NO_GRAD_CALLERS})
    train = "import torch\nfrom models.net import Model\n" + GRAD_CALLER
    project(tmp_path, **{"train.py": train})
    assert codes(tmp_path)["net.py"] == ["GF204"]
    (tmp_path / "train.py").write_text(train.replace("models.net", "other"), encoding="utf-8")
    assert codes(tmp_path)["net.py"] == []  # train.py imports another module


def test_fix_write_leaves_a_function_only_called_under_no_grad(tmp_path: Path) -> None:
    root = project(tmp_path, **{"model.py": MODEL, "main.py": NO_GRAD_CALLERS})
    options = RunOptions(rules=select_rules(), fix=True, write=True, unsafe_fixes=True)
    run = process_paths([str(root)], options)
    assert (root / "model.py").read_text(encoding="utf-8") == MODEL
    assert not any(r.written for r in run.files)
    (root / "main.py").write_text(NO_GRAD_CALLERS + GRAD_CALLER, encoding="utf-8")
    run = process_paths([str(root)], options)  # a caller with grad on: fixed and written
    assert "scores = scores * keep" in (root / "model.py").read_text(encoding="utf-8")
    assert [Path(r.path).name for r in run.files if r.written] == ["model.py"]
