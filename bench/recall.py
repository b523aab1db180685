"""Recall on real users' bugs: the cases of ``bench/realworld/`` found, fixed and proven.

    python bench/recall.py                      # every case, the table and the totals
    python bench/recall.py --case a_rnn_hidden   # cases whose id starts with this
    python bench/recall.py --json out.json       # also the rows as JSON
    python bench/recall.py --markdown            # the table as Markdown (docs/recall.md)
    python bench/recall.py --trace               # also what `gradfix trace` finds by running it

Each case is a directory with ``bug.py`` (a user's bug cut to a CPU script, the bug's
lines marked ``# bench: bug``, a docstring with ``source:``, ``symptom:`` and ``rule:``)
and ``fixed.py`` (the accepted fix). gradfix runs as a user runs it, in subprocesses, on a
copy of ``bug.py`` in a temporary directory:

- **found**: ``check`` (default rules) reports a finding on a marked line; **found
  (ALL)**: the same with ``--select ALL``;
- **fixed**: after ``fix --write --unsafe-fixes --select ALL`` the script prints what
  ``fixed.py`` prints (and both exit 0);
- **verified**: ``verify --select ALL`` gives at least one ``verified`` verdict and no
  ``rejected`` one;
- **wrong**: the fix changed the file but the script's output is not ``fixed.py``'s (a fix
  that makes the code worse or does not fix it while claiming to);
- with ``--trace``, **traced**: ``gradfix trace -- python bug.py`` reports a finding on a
  marked line (execution as a finder), and **trace fixed**: after ``trace --write`` (fixes
  proven by running the script again) the script prints what ``fixed.py`` prints.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent / "realworld"
GRADFIX = (sys.executable, "-m", "gradfix")
BUG_MARKER = re.compile(r"#\s*bench:\s*bug\b")
HEADER_FIELD = re.compile(r"^(source|symptom|rule|shape):\s*(.+?)\s*$", re.MULTILINE)
#: seconds a script or a gradfix run may take
TIMEOUT = 120
#: symptoms a run of the program shows (issue 14's measure of ``trace``)
RUN_VISIBLE = frozenset({"error", "nan-grad", "none-grad"})


@dataclass
class Case:
    id: str
    directory: Path
    source: str
    symptom: str
    rule: str
    bug_lines: list[int]

    @property
    def bug(self) -> Path:
        return self.directory / "bug.py"

    @property
    def fixed(self) -> Path:
        return self.directory / "fixed.py"


@dataclass
class Row:
    id: str
    symptom: str
    rule: str
    found: bool = False
    found_all: bool = False
    codes: list[str] = field(default_factory=list)
    fixed: bool = False
    verified: bool = False
    wrong: bool = False
    #: None: not measured (no --trace)
    traced: bool | None = None
    trace_fixed: bool | None = None
    #: why a step failed (one line), for docs/recall.md
    note: str = ""


def load_case(directory: Path) -> Case:
    """A case from its directory; ``ValueError`` names what is missing."""
    bug = directory / "bug.py"
    if not bug.is_file() or not (directory / "fixed.py").is_file():
        raise ValueError(f"{directory}: needs bug.py and fixed.py")
    text = bug.read_text(encoding="utf-8")
    fields = dict(HEADER_FIELD.findall(text))
    missing = [name for name in ("source", "symptom", "rule") if name not in fields]
    lines = [n for n, line in enumerate(text.splitlines(), 1) if BUG_MARKER.search(line)]
    if missing or not lines:
        what = ", ".join(missing + ([] if lines else ["a `# bench: bug` line"]))
        raise ValueError(f"{bug}: missing {what}")
    return Case(directory.name, directory, fields["source"], fields["symptom"],
                fields["rule"], lines)  # fmt: skip


def discover(root: Path = ROOT, prefix: str = "") -> list[Case]:
    directories = sorted(p for p in root.iterdir() if p.is_dir() and p.name.startswith(prefix))
    return [load_case(directory) for directory in directories if directory.name[0] not in "._"]


def run(command: Sequence[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            list(command), cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT, check=False
        )
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(list(command), -1, "", "timeout")


def outcome(script: Path) -> tuple[int, str]:
    """What a script does: its exit code and its stdout (its printed result)."""
    result = run([sys.executable, script.name], script.parent)
    return result.returncode, result.stdout


def findings_on(case: Case, script: Path, *select: str) -> list[str]:
    """Codes of the findings of ``check`` on the case's marked lines."""
    result = run([*GRADFIX, "check", "--no-cache", "--format", "json", *select, script.name],
                 script.parent)  # fmt: skip
    if result.returncode not in (0, 1):
        raise RuntimeError(f"check failed: {result.stderr.strip()[:200]}")
    findings = json.loads(result.stdout or "[]")
    return sorted({f["code"] for f in findings if _lines_of(f) & set(case.bug_lines)})


def _lines_of(finding: dict[str, int]) -> set[int]:
    """The lines a finding spans (a multi-line statement is found on any of its lines)."""
    return set(range(finding["line"], finding.get("end_line", finding["line"]) + 1))


def measure_trace(case: Case, row: Row) -> None:
    """``traced`` and ``trace_fixed`` of ``row``, on a fresh copy of the case."""
    with tempfile.TemporaryDirectory(prefix="gradfix-recall-") as temp:
        script = Path(temp) / "bug.py"
        shutil.copyfile(case.bug, script)
        command = [*GRADFIX, "trace", "--format", "json", "--timeout", "60"]
        result = run([*command, "--", sys.executable, "bug.py"], script.parent)
        try:
            findings = json.loads(result.stdout or "[]")
        except ValueError:
            findings = []
        row.traced = any(_lines_of(f) & set(case.bug_lines) for f in findings)
        before = script.read_text(encoding="utf-8")
        run([*command, "--write", "--", sys.executable, "bug.py"], script.parent)
        changed = script.read_text(encoding="utf-8") != before
        row.trace_fixed = changed and outcome(script) == outcome(case.fixed)


def measure(case: Case) -> Row:
    row = Row(case.id, case.symptom, case.rule)
    with tempfile.TemporaryDirectory(prefix="gradfix-recall-") as temp:
        script = Path(temp) / "bug.py"
        shutil.copyfile(case.bug, script)
        row.found = bool(findings_on(case, script))
        row.codes = findings_on(case, script, "--select", "ALL")
        row.found_all = bool(row.codes)
        expected = outcome(case.fixed)
        if expected[0] != 0:
            row.note = f"fixed.py exits {expected[0]}"
            return row
        verdicts = run([*GRADFIX, "verify", "--select", "ALL", "--format", "json",
                        script.name], script.parent)  # fmt: skip
        row.verified = _verified(verdicts.stdout)
        before = script.read_text(encoding="utf-8")
        run([*GRADFIX, "fix", "--write", "--unsafe-fixes", "--select", "ALL", "--no-cache",
             script.name], script.parent)  # fmt: skip
        if script.read_text(encoding="utf-8") == before:
            row.note = "no fix written" if row.found_all else "not found"
            return row
        after = outcome(script)
        row.fixed = after == expected
        row.wrong = not row.fixed
        if row.wrong:
            row.note = f"fixed script exits {after[0]}, prints {after[1].strip()[-60:]!r}"
    return row


def _verified(json_text: str) -> bool:
    try:
        verdicts = [v["verdict"] for v in json.loads(json_text or "[]")]
    except (ValueError, TypeError, KeyError):
        return False
    return "verified" in verdicts and "rejected" not in verdicts


def table(rows: Sequence[Row], markdown: bool = False) -> str:
    traced = any(r.traced is not None for r in rows)
    header = ["case", "symptom", "rule", "found", "found ALL", "codes", "fixed", "verified",
              "wrong", *(["traced", "trace fixed"] if traced else []), "note"]  # fmt: skip
    body = [[r.id, r.symptom, r.rule, _mark(r.found), _mark(r.found_all), ",".join(r.codes),
             _mark(r.fixed), _mark(r.verified), _mark(r.wrong),
             *([_mark(bool(r.traced)), _mark(bool(r.trace_fixed))] if traced else []),
             r.note] for r in rows]  # fmt: skip
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        return "\n".join(lines + ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |"
                                  for row in body])  # fmt: skip
    widths = [max(len(str(c)) for c in column) for column in zip(header, *body)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip()
                     for row in [header, *body])  # fmt: skip


def _mark(value: bool) -> str:
    return "yes" if value else "-"


def totals(rows: Sequence[Row]) -> str:
    count = len(rows)

    def share(n: int) -> str:
        return f"{n}/{count} ({100 * n / count:.0f} %)" if count else "0/0"

    return (
        f"cases {count}; found {share(sum(r.found for r in rows))}; "
        f"found with ALL {share(sum(r.found_all for r in rows))}; "
        f"fixed {share(sum(r.fixed for r in rows))}; "
        f"fixed and verified {share(sum(r.fixed and r.verified for r in rows))}; "
        f"wrong fixes {sum(r.wrong for r in rows)}" + _trace_totals(rows)
    )


def _trace_totals(rows: Sequence[Row]) -> str:
    """Trace's share of the cases a run can show: they raise, or give nan or None grads."""
    runnable = [r for r in rows if r.traced is not None and r.symptom in RUN_VISIBLE]
    if not runnable:
        return ""
    traced = sum(bool(r.traced) for r in runnable)
    fixed = sum(bool(r.trace_fixed) for r in runnable)
    return (
        f"; trace on the {len(runnable)} cases that raise or give nan/None grads: "
        f"found {traced}, fixed {fixed}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=ROOT)
    parser.add_argument("--case", default="", help="only cases whose id starts with this")
    parser.add_argument("--json", type=Path, help="also write the rows as JSON here")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    parser.add_argument("--trace", action="store_true", help="also measure `gradfix trace`")
    options = parser.parse_args(argv)
    try:
        cases = discover(options.root, options.case)
    except (ValueError, OSError) as error:
        print(f"recall: {error}", file=sys.stderr)
        return 2
    rows = []
    for case in cases:
        try:
            rows.append(measure(case))
            if options.trace:
                measure_trace(case, rows[-1])
        except RuntimeError as error:
            rows.append(Row(case.id, case.symptom, case.rule, note=str(error)))
        print(f"{case.id}: done", file=sys.stderr, flush=True)
    print(table(rows, options.markdown))
    print()
    print(totals(rows))
    if options.json:
        options.json.write_text(json.dumps([asdict(r) for r in rows], indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
