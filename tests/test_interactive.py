"""``gradfix fix --interactive``: one fix at a time, y/n/a/q, each file written once."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gradfix.cli import app

SOURCE = """import torch
w = torch.randn(3, requires_grad=True)
w.normal_()
print(w)
w.zero_()
a0 = w[0] * 2
A = torch.tensor([a0, w[1]])
"""
NORMAL = "with torch.no_grad():\n    w.normal_()\n"
ZERO = "with torch.no_grad():\n    w.zero_()\n"
STACK = "A = torch.stack([a0, w[1]])\n"


def review(tmp_path: Path, answers: str, *extra: str) -> tuple[int, str, list[str]]:
    for name in ("a.py", "b.py"):
        (tmp_path / name).write_text(SOURCE, encoding="utf-8")
    result = CliRunner().invoke(app, ["fix", "-i", *extra, str(tmp_path)], input=answers)
    texts = [(tmp_path / n).read_text(encoding="utf-8") for n in ("a.py", "b.py")]
    return result.exit_code, result.stdout, texts


def test_yes_no_and_quit(tmp_path: Path) -> None:
    code, out, (a, b) = review(tmp_path, "y\nn\ny\nq\n")
    assert code == 1  # declined and unreviewed fixes leave findings, as `fix --write` says
    assert NORMAL in a and "\nw.zero_()\n" in a and STACK in a
    assert b == SOURCE  # quit before anything was accepted there
    # the second diff is shown against the file with the first fix already in it
    second = out.split("Apply this fix?")[1]
    assert " with torch.no_grad():\n     w.normal_()\n" in second


def test_enter_is_no(tmp_path: Path) -> None:
    code, _, (a, b) = review(tmp_path, "\n\n")
    assert code == 1 and a == SOURCE and b == SOURCE


def test_all_remaining(tmp_path: Path) -> None:
    code, out, (a, b) = review(tmp_path, "n\na\n")
    assert "\nw.normal_()\n" in a and ZERO in a and STACK in a  # the declined one stays
    assert NORMAL in b and ZERO in b and STACK in b  # no question asked for b
    assert out.count("Apply this fix?") == 2


def test_verdict_is_shown_with_verify(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    (tmp_path / "a.py").write_text(
        "import torch\nw = torch.randn(3, requires_grad=True)\nw.normal_()\n"
        "(w * w).sum().backward()\n",
        encoding="utf-8",
    )
    result = CliRunner().invoke(app, ["fix", "-i", "--verify", str(tmp_path)], input="y\n")
    assert "Verdict: verified:" in result.stdout
    assert NORMAL in (tmp_path / "a.py").read_text(encoding="utf-8")


def test_unknown_answer_asks_again(tmp_path: Path) -> None:
    code, out, (a, b) = review(tmp_path, "Yes\nnope\nx\nno\nq\n")
    assert out.count("Please answer y (apply), n (skip), a (all remaining) or q (quit)") == 2
    assert out.count("Apply this fix?") == 5  # "nope" and "x" are asked again
    assert NORMAL in a and "\nw.zero_()\n" in a  # yes, then no to the second fix
    assert b == SOURCE


def test_end_of_input_quits(tmp_path: Path) -> None:
    code, out, (a, b) = review(tmp_path, "y\n")
    assert code == 1
    assert NORMAL in a and "\nw.zero_()\n" in a and b == SOURCE
    assert out.count("Apply this fix?") == 2  # nothing asked after the end of the input


#: two fixes: GF201 (wrap in no_grad) and GF101 (torch.stack)
TWO_FIXES = """import torch
w = torch.randn(3, requires_grad=True)
w.normal_()
a = torch.tensor([w[0], w[1]])
(a * w[:2]).sum().backward()
"""


def test_all_remaining_still_verifies_each_fix(tmp_path: Path, monkeypatch) -> None:
    """With --verify, `a` applies only the fixes the verifier accepts, and shows every
    verdict; a rejected one is never applied (the oracle is replaced by one that rejects
    the `torch.stack` fix: the real one verifies both)."""
    pytest.importorskip("torch")
    from gradfix import proof

    def prove_change(path: str, before: str, after: str, **_: object) -> tuple[str, str, dict]:
        if "torch.stack" in after and "torch.stack" not in before:
            return "rejected", "a forward result changed", {}
        return "verified", "forward results and gradients match", {}

    monkeypatch.setattr(proof, "prove_change", prove_change)
    for name in ("a.py", "b.py"):
        (tmp_path / name).write_text(TWO_FIXES, encoding="utf-8")
    result = CliRunner().invoke(app, ["fix", "-i", "--verify", str(tmp_path)], input="a\n")
    for name in ("a.py", "b.py"):
        text = (tmp_path / name).read_text(encoding="utf-8")
        assert NORMAL in text and "torch.tensor([w[0], w[1]])" in text, name
    assert result.stdout.count("Verdict: rejected: a forward result changed") == 2
    assert result.stdout.count("Verdict: verified:") == 2
    assert result.stderr.splitlines()[-1] == (
        "Wrote 2 files (all remaining; 2 rejected by verification); 2 findings remaining."
    )
    assert result.exit_code == 1


def test_exit_status_is_that_of_fix_write(tmp_path: Path) -> None:
    """0 when the review leaves no finding, 1 when findings are left (declined, or not
    proven), as `fix --write` (it used to be 0 whatever was left)."""
    code, _, (a, b) = review(tmp_path, "a\n")
    assert code == 0 and NORMAL in a and NORMAL in b
    code, _, _ = review(tmp_path, "n\na\n")
    assert code == 1
    for name in ("a.py", "b.py"):
        (tmp_path / name).write_text(SOURCE, encoding="utf-8")
    result = CliRunner().invoke(app, ["fix", "-i", str(tmp_path)], input="q\n")
    assert result.exit_code == 1
    assert (
        result.stderr.splitlines()[-1]
        == "Wrote 0 files (0 accepted one by one); 6 findings remaining."
    )


def test_unverified_fixes_left_by_all_are_counted_and_exit_1(tmp_path: Path, monkeypatch) -> None:
    """`--interactive --verify` + `a`: a fix nothing could run is not applied (without
    --unsafe-fixes), the summary says it was unverified, not "rejected or unverified",
    and the exit status is 1: a finding is left."""
    pytest.importorskip("torch")
    from gradfix import proof

    monkeypatch.setattr(
        proof, "prove_change", lambda *_, **__: ("unverified", "could not run: ImportError", {})
    )
    (tmp_path / "a.py").write_text(TWO_FIXES, encoding="utf-8")
    result = CliRunner().invoke(app, ["fix", "-i", "--verify", str(tmp_path)], input="a\n")
    assert (tmp_path / "a.py").read_text(encoding="utf-8") == TWO_FIXES
    assert result.stderr.splitlines()[-1] == (
        "Wrote 0 files (all remaining; 2 unverified (applied only with --unsafe-fixes)); "
        "2 findings remaining."
    )
    assert result.exit_code == 1
