"""bench/oracle.py reads a case's pairs as the benchmark defines them (no run here)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "bench"
spec = importlib.util.spec_from_file_location("bench_oracle", BENCH / "oracle.py")
assert spec is not None and spec.loader is not None
oracle = importlib.util.module_from_spec(spec)
sys.modules.setdefault("bench_oracle", oracle)  # its dataclasses look their module up
spec.loader.exec_module(oracle)


def test_a_case_is_its_expert_fix_and_its_wrong_fixes_by_their_declared_cause(
    tmp_path: Path,
) -> None:
    case = tmp_path / "b_case"
    case.mkdir()
    (case / "bug.py").write_text("x = 1\n", encoding="utf-8")
    (case / "fixed.py").write_text("x = 2\n", encoding="utf-8")
    (case / "wrong_a.py").write_text('"""...\n\nwrong: detach\nwhy: y\n"""\n', encoding="utf-8")
    (case / "wrong_b.py").write_text("x = 3\n", encoding="utf-8")  # no header: its name
    pairs = oracle.pairs_of(case)
    assert [(p.kind, p.cause, p.file) for p in pairs] == [
        ("expert", "expert", "fixed.py"),
        ("wrong", "detach", "wrong_a.py"),
        ("wrong", "b", "wrong_b.py"),
    ]
    pairs[0].verdict, pairs[1].verdict, pairs[2].verdict = "verified", "rejected", "verified"
    summary = oracle.summary(pairs)
    assert summary["expert"] == {"verified": 1} and summary["wrong"] == {
        "rejected": 1,
        "verified": 1,
    }
    assert summary["wrong_verified"] == ["b_case/wrong_b.py"]
    assert [p.right for p in pairs] == [True, True, False]


def test_every_wrong_fix_of_the_benchmarks_declares_its_cause() -> None:
    for root in (BENCH / "realworld", *sorted((BENCH / "blind").glob("batch*"))):
        wrong = sorted(root.glob("*/wrong_*.py"))
        assert wrong, root
        for path in wrong:
            header = oracle.WRONG_FIELD.search(path.read_text(encoding="utf-8"))
            assert header is not None, path


def test_a_wrong_fix_equal_to_the_expert_fix_on_this_program_is_counted_apart() -> None:
    """A wrong proof whose runs equal the expert fix's is listed apart, and the rejection
    rate is also given over the pairs a run can tell apart (the raw figures stay)."""
    pairs = [
        oracle.Pair("c", "expert", "expert", "fixed.py", verdict="verified"),
        oracle.Pair("c", "wrong", "detach", "wrong_a.py", verdict="verified", same_as_expert=True),
        oracle.Pair("c", "wrong", "other", "wrong_b.py", verdict="verified"),
        oracle.Pair("c", "wrong", "other", "wrong_c.py", verdict="rejected"),
    ]
    summary = oracle.summary(pairs)
    assert summary["wrong_same_as_expert"] == ["c/wrong_a.py"]
    text = oracle.report(pairs)
    assert "wrong fixes verified (wrong proofs): c/wrong_a.py, c/wrong_b.py" in text
    assert "rejected among the 2 wrong fixes a run can tell apart: 1 (50 %)" in text
