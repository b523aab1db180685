"""``gradfix fix --interactive``: review fixes one at a time, then write each file once.

Fixes come sorted by file and line. Each is shown as a diff against the file *as it stands
after the fixes already accepted* (with its verdict when verification is on) and answered
with ``y`` (apply), ``n`` (skip, the default), ``a`` (apply this and every remaining fix)
or ``q`` (stop, keeping what was accepted; also the end of the input). Any other answer is
asked again. With verification, ``a`` still proves every remaining fix and shows its
verdict: a rejected fix is never applied, an unverified one only with ``--unsafe-fixes``
(the rules of ``fix --verify``). Nothing is written until the review ends; then every file
with accepted fixes is written once (atomically, never over a file that changed on disk
meanwhile).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from gradfix.engine import SingleFix, lint_source, single_fixes
from gradfix.fileio.diff import unified_diff
from gradfix.proof import may_apply
from gradfix.rule import Finding, Rule
from gradfix.shorten import shorten

PROMPT = "Apply this fix? [y]es, [n]o, [a]ll remaining, [q]uit (default n): "
HINT = "Please answer y (apply), n (skip), a (all remaining) or q (quit); Enter: n."
#: what each accepted answer means (case-insensitive); Enter is "n"
ANSWERS = {
    **dict.fromkeys(("y", "yes"), "y"),
    **dict.fromkeys(("n", "no", ""), "n"),
    **dict.fromkeys(("a", "all"), "a"),
    **dict.fromkeys(("q", "quit"), "q"),
}
#: a review never asks more often than this per file (a fix that keeps reappearing)
MAX_QUESTIONS_PER_FILE = 500


@dataclass
class Review:
    """What the user decided for one file."""

    path: str
    original: str
    current: str
    accepted: int = 0
    skipped: int = 0
    #: fixes ``a`` did not apply because the verifier did not accept them
    refused: int = 0
    #: of those, the ones the verifier rejected (the others were unverified)
    rejected: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return self.current != self.original


@dataclass
class Reviewer:
    rules: Sequence[type[Rule]]
    unsafe_fixes: bool
    ask: Callable[[str], str]  # shows the prompt, returns the answer ("" at end of input)
    show: Callable[[str], None]
    #: (path, before, after, rule codes of the fix) -> (status, reason): the oracle, None
    #: without verification (the codes: a fix that must restore a gradient is held to it)
    verdict: Callable[[str, str, str, list[str]], tuple[str, str]] | None = None
    apply_all: bool = False
    stopped: bool = False

    def review(self, path: str, source: str) -> Review:
        review = Review(path, source, source)
        for _ in range(MAX_QUESTIONS_PER_FILE):
            if self.stopped:
                break
            candidate = self._next(review)
            if candidate is None:
                break
            if self.apply_all and self.verdict is None:
                review.current = self._apply_remaining(review)
                break
            if self.apply_all:
                self._apply_if_proven(review, candidate, self._show(review, candidate))
            else:
                self._decide(review, candidate)
        return review

    def _next(self, review: Review) -> SingleFix | None:
        """The first undecided fix: the ``skipped`` first ones were declined (they keep
        their order, whatever fixes above them did to line numbers)."""
        ordered = self._ordered(review)
        return ordered[review.skipped] if review.skipped < len(ordered) else None

    def _show(self, review: Review, candidate: SingleFix) -> str | None:
        """Show the fix (and its verdict); return the verdict's status."""
        assert candidate.source is not None
        first = min(candidate.findings, key=lambda f: (f.line, f.col))
        header = f"{review.path}:{first.line}:{first.col}: {first.code} {first.message}"
        safety = "" if candidate.safety == "safe" else " (unsafe)"
        self.show(f"\n{header}\nFix{safety}: {candidate.description}")
        status = None
        if self.verdict is not None:
            codes = sorted({finding.code for finding in candidate.findings})
            status, reason = self.verdict(review.path, review.current, candidate.source, codes)
            self.show(f"Verdict: {status}: {shorten(reason)}")
        self.show(unified_diff(review.current, candidate.source, review.path).rstrip("\n"))
        return status

    def _decide(self, review: Review, candidate: SingleFix) -> None:
        status = self._show(review, candidate)
        answer = self._answer()
        if answer == "y":
            assert candidate.source is not None
            review.current, review.accepted = candidate.source, review.accepted + 1
        elif answer == "a":
            self.apply_all = True
            if self.verdict is not None:
                self._apply_if_proven(review, candidate, status)
                return
            assert candidate.source is not None
            review.current = candidate.source
            review.accepted += 1
            review.current = self._apply_remaining(review)
        elif answer == "q":
            self.stopped = True
        else:  # "n" or Enter: skip (the safe default)
            review.skipped += 1

    def _answer(self) -> str:
        """y, n (also Enter), a or q (also the end of the input); asks again otherwise."""
        while True:
            raw = self.ask(PROMPT)
            if not raw:
                return "q"
            answer = ANSWERS.get(raw.strip().lower())
            if answer is not None:
                return answer
            self.show(HINT)

    def _apply_if_proven(self, review: Review, candidate: SingleFix, status: str | None) -> None:
        """After ``a`` with verification: apply the fix only if its verdict allows it."""
        if status is not None and may_apply(status, unverified=self.unsafe_fixes):
            assert candidate.source is not None
            review.current, review.accepted = candidate.source, review.accepted + 1
        else:
            review.skipped, review.refused = review.skipped + 1, review.refused + 1
            review.rejected += status == "rejected"

    def _apply_remaining(self, review: Review) -> str:
        """Every remaining fix, except those declined before ``a`` was answered."""
        result = lint_source(
            review.current,
            rules=self.rules,
            path=review.path,
            fix=True,
            unsafe_fixes=self.unsafe_fixes,
            keep=None if not review.skipped else self._not_declined(review),
        )
        return result.source

    def _not_declined(self, review: Review) -> Callable[[Finding], bool]:
        declined = {
            (f.line, f.col, f.code)
            for s in self._ordered(review)[: review.skipped]
            for f in s.findings
        }
        return lambda finding: (finding.line, finding.col, finding.code) not in declined

    def _ordered(self, review: Review) -> list[SingleFix]:
        """The applicable fixes of the file as it stands, by their first finding."""
        singles = [
            s
            for s in single_fixes(review.current, rules=self.rules, path=review.path)
            if s.source is not None and (self.unsafe_fixes or s.safety == "safe")
        ]
        return sorted(singles, key=lambda s: min((f.line, f.col) for f in s.findings))
