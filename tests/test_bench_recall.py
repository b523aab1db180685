"""bench/recall.py: found, fixed, verified and wrong, measured on tiny cases."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"

BUG = '''"""Initialising a weight in place raises.

source: https://example.invalid/report
symptom: error
rule: GF201
"""
import torch

w = torch.ones(3, requires_grad=True)
w.mul_(2)  # bench: bug
(w * 2).sum().backward()
print(w.grad)
'''
FIXED = BUG.replace("w.mul_(2)  # bench: bug", "with torch.no_grad():\n    w.mul_(2)")
#: a bug gradfix has no rule for: found by nobody, nothing written
UNSEEN = BUG.replace("w.mul_(2)  # bench: bug", "w = w  # bench: bug")


@pytest.fixture
def recall(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(BENCH))
    return importlib.import_module("recall")


def make_case(root: Path, name: str, bug: str, fixed: str) -> None:
    (root / name).mkdir(parents=True)
    (root / name / "bug.py").write_text(bug, encoding="utf-8")
    (root / name / "fixed.py").write_text(fixed, encoding="utf-8")


def test_found_fixed_verified_wrong_and_unseen(recall: ModuleType, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    make_case(tmp_path, "good", BUG, FIXED)
    # the accepted fix prints something else than gradfix's fix: a wrong fix
    make_case(tmp_path, "other", BUG, FIXED.replace("print(w.grad)", "print(w.grad * 0)"))
    make_case(tmp_path, "unseen", UNSEEN, UNSEEN.replace("  # bench: bug", ""))
    rows = {row.id: row for row in map(recall.measure, recall.discover(tmp_path))}

    good, other, unseen = rows["good"], rows["other"], rows["unseen"]
    assert (good.found, good.found_all, good.codes) == (True, True, ["GF201"])
    assert (good.fixed, good.verified, good.wrong) == (True, True, False)
    assert (other.fixed, other.wrong) == (False, True)
    assert (unseen.found_all, unseen.fixed, unseen.wrong, unseen.note) == (
        False, False, False, "not found",
    )  # fmt: skip
    summary = recall.totals(list(rows.values()))
    assert "cases 3; found 2/3 (67 %)" in summary and "wrong fixes 1" in summary


def test_trace_finds_and_fixes_by_running_the_script(recall: ModuleType, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    make_case(tmp_path, "good", BUG, FIXED)
    (case,) = recall.discover(tmp_path)
    row = recall.Row(case.id, case.symptom, case.rule)
    recall.measure_trace(case, row)
    assert (row.traced, row.trace_fixed) == (True, True)
    assert "trace on the 1 cases that raise or give nan/None grads: found 1, fixed 1" in (
        recall.totals([row])
    )


def test_a_case_without_its_marker_or_header_is_named(recall: ModuleType, tmp_path: Path) -> None:
    make_case(tmp_path, "bare", BUG.replace("  # bench: bug", "").replace("rule: GF201\n", ""), "")
    with pytest.raises(ValueError, match=r"bare/bug.py: missing rule, a `# bench: bug` line"):
        recall.discover(tmp_path)
    assert recall.main(["--root", str(tmp_path)]) == 2
