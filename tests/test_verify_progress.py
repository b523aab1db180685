"""Verification shows its progress by fix: the total is the fixes to prove, and each
file's verdicts advance it as they come."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")

from gradfix.cli.proving import harness_limits, verify_run  # noqa: E402
from gradfix.registry import all_rules  # noqa: E402
from gradfix.runner import RunOptions, process_paths  # noqa: E402

TWO_FIXES = """\
import torch

w = torch.randn(3, requires_grad=True) * 0.5
b = torch.zeros(3, requires_grad=True) + 1.0
(w * 2 + b).sum().backward()
"""
ONE_FIX = """\
import torch

v = torch.ones(2, requires_grad=True) / 4
(v * v).sum().backward()
"""


def test_verification_advances_once_per_fix_of_every_file(tmp_path: Path) -> None:
    (tmp_path / "two.py").write_text(TWO_FIXES)
    (tmp_path / "one.py").write_text(ONE_FIX)
    (tmp_path / "clean.py").write_text("x = 1\n")
    options = RunOptions(rules=all_rules(), fix=True, unsafe_fixes=True)
    run = process_paths([str(tmp_path)], options, jobs=1)
    totals: list[int] = []
    advances: list[None] = []

    def progress(total: int):  # type: ignore[no-untyped-def]
        totals.append(total)
        return lambda: advances.append(None)

    verdicts = verify_run(run, options, harness_limits(60.0, None), progress=progress)
    proven = sum(len(found) for found in verdicts.values())
    assert totals == [3] and proven == 3 and len(advances) == 3
