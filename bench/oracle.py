"""The oracle on ground truth: experts' fixes must be verified, plausible wrong fixes rejected.

    python bench/oracle.py                          # bench/realworld: table and totals
    python bench/oracle.py --root bench/blind/batch1 # another set of cases (repeatable)
    python bench/oracle.py --case a_rnn               # cases whose id starts with this
    python bench/oracle.py --json out.json --markdown # rows as JSON; totals as Markdown

Each case directory holds ``bug.py`` (a user's bug), ``fixed.py`` (the fix the report's
maintainers merged or its thread accepted: the *expert* fix) and, where built,
``wrong_<cause>.py`` files: plausible wrong fixes of the same bug (a ``.detach()`` on the
path, a clamp that kills the gradient it guards, a dropped loss term, the forward under
``no_grad``, ``retain_graph=True`` where state should be detached, a changed forward),
each with ``wrong: <cause>`` and ``why: ...`` in its docstring. For every pair the oracle
is asked as a user asks it, ``gradfix verify --baseline bug.py <fix>.py --format json``,
in a subprocess on copies of the files in a temporary directory, and its verdict is
scored: an expert fix must be *verified* (rejected is a false alarm, unverified a miss), a
wrong fix must be *rejected* (verified is a wrong proof, unverified a miss).

Rejections of expert fixes are grouped by the oracle's reason (its first words:
``gradient wrong``, ``gradient changed``, ``forward changed``...) so a change can be aimed
at a cause, never at a case; the wrong fixes verified are listed by name.

A wrong fix the oracle verifies is then compared with the expert fix itself
(``verify --baseline fixed.py <wrong>.py``): where that too is verified, the wrong fix
computes the expert's forward results and gradients on this program (its error shows only
on another program: an objective that does not depend on the value it gets wrong, a
validation pass whose gradients are never used), so no run of this program can tell them
apart. Such pairs are counted apart ("same as the expert's here") and the rejection rate is
also given over the pairs a run can tell apart; the raw figures lead.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

BENCH = Path(__file__).resolve().parent
DEFAULT_ROOT = BENCH / "realworld"
GRADFIX = (sys.executable, "-m", "gradfix")
WRONG_FIELD = re.compile(r"^wrong:\s*(\S+)", re.MULTILINE)
#: seconds one ``verify --baseline`` may take (it runs each version and finite differences)
TIMEOUT = 300
#: the oracle's reasons, by their first words, grouped by cause (issue 28's list)
CAUSES = (
    ("finite-difference", re.compile(r"finite-difference derivative|finite differences")),
    ("buggy autograd as reference", re.compile(r"gradient changed|before's autograd gives")),
    ("leaf sets", re.compile(r"creates \d+ leaf|leaf tensor\(s\), before")),
    ("backward calls", re.compile(r"makes \d+ backward call")),
    ("forward changed", re.compile(r"forward changed|forward result")),
    ("after raised", re.compile(r"after raised")),
    ("gradient lost", re.compile(r"gradient lost|no gradient|None")),
    ("non-finite", re.compile(r"non-finite|nan|inf")),
)


@dataclass
class Pair:
    case: str
    kind: str  # "expert" or "wrong"
    cause: str  # the wrong fix's cause; "expert" for the expert fix
    file: str
    verdict: str = ""  # verified | rejected | unverified | error
    reason: str = ""
    seconds: float = 0.0
    #: a wrong fix verified whose runs equal the expert fix's (see the module docstring)
    same_as_expert: bool = False

    @property
    def right(self) -> bool:
        return self.verdict == ("verified" if self.kind == "expert" else "rejected")


def pairs_of(directory: Path) -> list[Pair]:
    if not (directory / "bug.py").is_file() or not (directory / "fixed.py").is_file():
        return []
    found = [Pair(directory.name, "expert", "expert", "fixed.py")]
    for wrong in sorted(directory.glob("wrong_*.py")):
        header = WRONG_FIELD.search(wrong.read_text(encoding="utf-8"))
        cause = header.group(1) if header else wrong.stem.removeprefix("wrong_")
        found.append(Pair(directory.name, "wrong", cause, wrong.name))
    return found


def discover(roots: Sequence[Path], prefix: str = "") -> list[tuple[Path, Pair]]:
    found = []
    for root in roots:
        for directory in sorted(p for p in root.iterdir() if p.is_dir()):
            if directory.name.startswith(prefix) and directory.name[0] not in "._":
                found += [(directory, pair) for pair in pairs_of(directory)]
    return found


def judge(directory: Path, pair: Pair, timeout: float = TIMEOUT) -> Pair:
    """Ask ``verify --baseline`` about one pair, on copies of the case's files; a wrong fix
    verified is also compared with the expert fix (``same_as_expert``)."""
    import time

    started = time.monotonic()
    pair.verdict, pair.reason = ask(directory, "bug.py", pair.file, timeout)
    pair.seconds = round(time.monotonic() - started, 1)
    if pair.kind == "wrong" and pair.verdict == "verified":
        pair.same_as_expert = ask(directory, "fixed.py", pair.file, timeout)[0] == "verified"
    return pair


def ask(directory: Path, old: str, new: str, timeout: float = TIMEOUT) -> tuple[str, str]:
    """``verify --baseline OLD NEW`` in a copy of the case: (verdict, reason)."""
    with tempfile.TemporaryDirectory(prefix="gradfix-oracle-") as temp:
        work = Path(temp)
        for source in directory.iterdir():
            if source.is_file():
                shutil.copyfile(source, work / source.name)
        command = [*GRADFIX, "verify", "--baseline", "--format", "json", old, new]
        try:
            result = subprocess.run(command, cwd=work, capture_output=True, text=True,
                                    timeout=timeout, check=False)  # fmt: skip
        except subprocess.TimeoutExpired:
            return "error", f"timeout after {timeout:.0f} s"
    try:
        verdicts = json.loads(result.stdout)
        verdict = verdicts[0] if isinstance(verdicts, list) else verdicts
        return verdict["verdict"], verdict.get("reason", "")
    except (ValueError, KeyError, IndexError, TypeError):
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        return "error", f"exit {result.returncode}: {last[:200]}"


def cause_of(reason: str) -> str:
    for name, pattern in CAUSES:
        if pattern.search(reason):
            return name
    return "other"


def summary(pairs: Sequence[Pair]) -> dict[str, object]:
    experts = [p for p in pairs if p.kind == "expert"]
    wrongs = [p for p in pairs if p.kind == "wrong"]
    by_cause: dict[str, Counter[str]] = {}
    for pair in wrongs:
        by_cause.setdefault(pair.cause, Counter())[pair.verdict] += 1
    return {
        "expert": dict(Counter(p.verdict for p in experts)),
        "expert_total": len(experts),
        "expert_rejected_by_reason": dict(
            Counter(cause_of(p.reason) for p in experts if p.verdict == "rejected")
        ),
        "wrong": dict(Counter(p.verdict for p in wrongs)),
        "wrong_total": len(wrongs),
        "wrong_by_cause": {cause: dict(counts) for cause, counts in sorted(by_cause.items())},
        # a verified reason says what matched, not why the fix is wrong: list them instead
        "wrong_verified": sorted(f"{p.case}/{p.file}" for p in wrongs if p.verdict == "verified"),
        "wrong_same_as_expert": sorted(f"{p.case}/{p.file}" for p in wrongs if p.same_as_expert),
    }


def _share(counts: dict[str, int], key: str, total: int) -> str:
    n = counts.get(key, 0)
    return f"{n} ({100 * n / total:.0f} %)" if total else "0"


def report(pairs: Sequence[Pair], markdown: bool = False) -> str:
    s = summary(pairs)
    expert, wrong = s["expert"], s["wrong"]
    assert isinstance(expert, dict) and isinstance(wrong, dict)
    ne, nw = int(s["expert_total"]), int(s["wrong_total"])  # type: ignore[call-overload]
    rows = [
        ["expert fixes", str(ne), _share(expert, "verified", ne), _share(expert, "rejected", ne),
         _share(expert, "unverified", ne), _share(expert, "error", ne)],
        ["wrong fixes", str(nw), _share(wrong, "verified", nw), _share(wrong, "rejected", nw),
         _share(wrong, "unverified", nw), _share(wrong, "error", nw)],
    ]  # fmt: skip
    by_cause = s["wrong_by_cause"]
    assert isinstance(by_cause, dict)
    for cause, counts in by_cause.items():
        n = sum(counts.values())
        rows.append([f"  wrong: {cause}", str(n), _share(counts, "verified", n),
                     _share(counts, "rejected", n), _share(counts, "unverified", n),
                     _share(counts, "error", n)])  # fmt: skip
    header = ["pairs", "n", "verified", "rejected", "unverified", "error"]
    lines = _table(header, rows, markdown)
    lines.append("")
    lines.append(f"expert fixes rejected, by the oracle's reason: {s['expert_rejected_by_reason']}")
    verified = s["wrong_verified"]
    assert isinstance(verified, list)
    lines.append("wrong fixes verified (wrong proofs): " + (", ".join(verified) or "none"))
    same = s["wrong_same_as_expert"]
    assert isinstance(same, list)
    if same:
        told = nw - len(same)
        lines.append(
            f"of them the same as the expert's fix on this program (its runs equal the "
            f"expert fix's: no run of it tells them apart): {', '.join(same)}; "
            f"rejected among the {told} wrong fixes a run can tell apart: "
            f"{_share(wrong, 'rejected', told)}"
        )
    return "\n".join(lines)


def _table(header: list[str], rows: list[list[str]], markdown: bool) -> list[str]:
    if markdown:
        out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        return out + ["| " + " | ".join(row) + " |" for row in rows]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in [header, *rows]]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", action="append", type=Path, help="a folder of cases")
    parser.add_argument("--case", default="", help="only cases whose id starts with this")
    parser.add_argument("--jobs", type=int, default=2, help="pairs judged at the same time")
    parser.add_argument("--kind", choices=("all", "expert", "wrong"), default="all",
                        help="judge only the experts' fixes or only the wrong ones")  # fmt: skip
    parser.add_argument("--json", type=Path, help="write every pair's verdict as JSON")
    parser.add_argument("--markdown", action="store_true", help="the totals as Markdown")
    parser.add_argument("--quiet", action="store_true", help="no line per pair")
    args = parser.parse_args(argv)
    roots = args.root or [DEFAULT_ROOT]
    work = [(d, p) for d, p in discover(roots, args.case) if args.kind in ("all", p.kind)]
    if not work:
        print("no cases found", file=sys.stderr)
        return 2
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        pairs = []
        for pair in pool.map(lambda item: judge(*item), work):
            pairs.append(pair)
            if not args.quiet:
                mark = "ok " if pair.right else "BAD"
                print(f"{mark} {pair.case}/{pair.file} [{pair.cause}] {pair.verdict}: "
                      f"{pair.reason[:160]}", flush=True)  # fmt: skip
    print(report(pairs, args.markdown))
    if args.json:
        args.json.write_text(json.dumps([asdict(p) for p in pairs], indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
