"""Verdict reasons and error messages on one readable line: never cut inside a word, the
whole text kept for machines (``--format json``, reports)."""

from __future__ import annotations

import re

from gradfix.proof import FixVerdict
from gradfix.rule import Finding
from gradfix.shorten import REASON_CHARS, shorten
from gradfix.verify.instrument import ONE_LINE_CHARS, one_line

#: a verified reason as long as the one `trace --write` printed (2,700 characters)
LEAVES = ", ".join(f"#{k} 'model.layer{k}.weight' (line {k + 10})" for k in range(60))
LONG_REASON = (
    "verified together with the file's other fixes (forward results and gradients match "
    f"over 1 backward call(s) and 60 leaf tensor(s); leaves compared: {LEAVES}); alone: "
    "gradient lost: leaf 5 'decoder.cell.weight_hh' (nn.Parameter at line 9): the graph "
    "is still cut"
)


def _words(text: str) -> set[str]:
    return set(re.findall(r"[\w'#.]+", text))


def test_a_long_verdict_line_is_one_readable_line_and_json_keeps_it_whole() -> None:
    assert len(LONG_REASON) > 2_500
    finding = Finding(17, 18, "GF205", "data-mutation", "message", 17, 30)
    verdict = FixVerdict("train.py", finding, "verified", LONG_REASON, "safe", "fix")
    line = verdict.line()
    reason = line.split(" verified: ", 1)[1]
    assert "\n" not in line and len(reason) <= REASON_CHARS
    assert reason.startswith("verified together with the file's other fixes (…)")
    assert "alone: gradient lost: leaf 5 'decoder.cell.weight_hh'" in reason  # the point kept
    assert _words(reason.replace("…", " ")) <= _words(LONG_REASON)  # no word cut in two
    assert verdict.to_dict()["reason"] == LONG_REASON


def test_a_text_without_details_is_cut_at_a_clause_or_word_with_an_ellipsis() -> None:
    text = "could not run: RuntimeError at line 3: " + "mat1 and mat2 shapes cannot be " * 20
    short = shorten(text, 120)
    assert len(short) <= 120 and short.endswith(" …")
    assert _words(short.replace("…", " ")) <= _words(text)
    assert shorten("forward results match", 120) == "forward results match"


def test_a_huge_error_message_is_cut_between_words() -> None:
    """It was cut at 297 characters whatever was there (`... with torc...`)."""
    message = "expected all tensors to be on the same device, found " + "cpu and torch " * 400
    kept = one_line(RuntimeError(message + "\nsecond line"))
    assert len(kept) <= ONE_LINE_CHARS and kept.endswith("…")
    assert kept[: -len("…")].rstrip().endswith(("cpu and", "torch", "cpu", "and"))
    assert one_line(ValueError("short message\nmore")) == "short message"
