"""Robustness sweep over real code: gradfix never crashes, never breaks or touches a file
it should not, and a second fix finds nothing to change.

    python bench/sweep.py                                  # the whole pinned corpus
    python bench/sweep.py --packages timm==1.0.31 -j 2
    python bench/sweep.py --sample bench/corpus_sample.txt # the CI sample
    python bench/sweep.py --dir path/to/code               # any directory

The files are copied into a temporary directory (the source is never modified) and
``gradfix`` runs there in subprocesses, as a user would run it:

1. ``check --select ALL``: exit 0 or 1, and stderr has nothing but one-line
   ``path: message`` lines (no traceback, no internal error);
2. ``fix --write --unsafe-fixes --select ALL``: exit 0 or 1; every file Python could
   parse still parses (``ast.parse``); every file ``check`` found nothing in is
   byte-identical to its original;
3. ``fix --unsafe-fixes --select ALL`` again on the files step 2 changed: no diff, exit 0
   (idempotence), and nothing written.

Each violation is one line of ``SweepReport.problems``; tests/test_sweep.py runs this on
a fixed sample in CI and on the whole corpus when slow tests are on.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

#: ``gradfix`` as a subprocess of the running interpreter
GRADFIX = (sys.executable, "-m", "gradfix")
#: every rule, every fix, no cache: the most a run can do to a file
ALL_RULES = ("--select", "ALL", "--no-cache")


@dataclass
class SweepReport:
    files: int = 0
    #: files with at least one finding of ``check``
    with_findings: int = 0
    #: relative paths that ``fix --write`` changed
    changed: list[str] = field(default_factory=list)
    #: one line per violated invariant; empty: the sweep passed
    problems: list[str] = field(default_factory=list)
    #: ``path: note: ...`` lines (fixes the engine dropped because they broke the syntax)
    notes: list[str] = field(default_factory=list)
    #: wall seconds of each gradfix run
    seconds: dict[str, float] = field(default_factory=dict)

    def summary(self) -> str:
        timing = ", ".join(f"{step} {s:.1f} s" for step, s in self.seconds.items())
        return (
            f"{self.files} files, {self.with_findings} with findings, {len(self.changed)} "
            f"changed by fix --write, {len(self.notes)} notes, {len(self.problems)} problems "
            f"({timing})"
        )


def sweep(root: Path, files: Sequence[str], work: Path, *, jobs: int = 2) -> SweepReport:
    """Copy ``files`` (paths relative to ``root``) into the empty directory ``work`` and
    run the three steps there; return what was found."""
    report = SweepReport(files=len(files))
    originals = copy_files(root, files, work)
    findings = _check(work, jobs, report)
    report.with_findings = len(findings)
    _fix_write(work, originals, findings, jobs, report)
    _fix_again(work, report)
    return report


def copy_files(root: Path, files: Sequence[str], work: Path) -> dict[str, bytes]:
    """The original bytes of each file, copied to the same relative path under ``work``."""
    originals = {}
    for relative in files:
        data = (root / relative).read_bytes()
        target = work / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        originals[relative] = data
    return originals


def run_gradfix(work: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    start = time.perf_counter()
    result = subprocess.run(
        [*GRADFIX, *args], cwd=work, capture_output=True, text=True, check=False
    )
    return result, time.perf_counter() - start


def _check(work: Path, jobs: int, report: SweepReport) -> set[str]:
    """Step 1; the relative paths with findings."""
    result, report.seconds["check"] = run_gradfix(
        work, "check", *ALL_RULES, "--format", "json", "-j", str(jobs), "."
    )
    _expect_exit(report, "check", result, (0, 1))
    report.problems += bad_stderr_lines("check", result.stderr, work)
    try:
        findings = json.loads(result.stdout or "[]")
    except ValueError:
        report.problems.append(f"check: stdout is not JSON: {result.stdout[:200]!r}")
        return set()
    return {os.path.normpath(str(finding["path"])) for finding in findings}


def _fix_write(
    work: Path, originals: dict[str, bytes], findings: set[str], jobs: int, report: SweepReport
) -> None:
    """Step 2."""
    result, report.seconds["fix --write"] = run_gradfix(
        work, "fix", "--write", "--no-verify", "--unsafe-fixes", *ALL_RULES, "-j", str(jobs), "."
    )
    _expect_exit(report, "fix --write", result, (0, 1))
    report.problems += bad_stderr_lines("fix --write", result.stderr, work, summary=True)
    report.notes += [line for line in result.stderr.splitlines() if ": note: " in line]
    for relative, before in originals.items():
        after = (work / relative).read_bytes()
        if after == before:
            continue
        report.changed.append(relative)
        if os.path.normpath(relative) not in findings:
            report.problems.append(f"{relative}: changed by fix --write without a finding")
        if parses(before) and not parses(after):
            report.problems.append(f"{relative}: fix --write left a file Python cannot parse")


def _fix_again(work: Path, report: SweepReport) -> None:
    """Step 3, on the files step 2 changed (the others had nothing to change already)."""
    if not report.changed:
        return
    snapshot = {relative: (work / relative).read_bytes() for relative in report.changed}
    result, report.seconds["fix again"] = run_gradfix(
        work, "fix", "--unsafe-fixes", *ALL_RULES, "-j", "1", *report.changed
    )
    _expect_exit(report, "second fix", result, (0,))
    headers = [line for line in result.stdout.splitlines() if line.startswith("--- a/")]
    for header in headers:
        path = header[len("--- a/") :]
        report.problems.append(f"{path}: a second fix still changes it (not idempotent)")
    report.problems += bad_stderr_lines("second fix", result.stderr, work, summary=True)
    for relative, data in snapshot.items():
        if (work / relative).read_bytes() != data:
            report.problems.append(f"{relative}: fix without --write changed the file")


def _expect_exit(
    report: SweepReport,
    step: str,
    result: subprocess.CompletedProcess[str],
    expected: tuple[int, ...],
) -> None:
    if result.returncode not in expected:
        last = result.stderr.strip().splitlines()[-1:] or [""]
        report.problems.append(f"{step}: exit {result.returncode}: {last[0][:300]}")


def bad_stderr_lines(step: str, stderr: str, work: Path, *, summary: bool = False) -> list[str]:
    """Every stderr line must be a one-line ``path: message`` about an existing file (or a
    ``warning:``), never a traceback or an internal error; with ``summary`` the last line
    is ``fix``'s summary."""
    lines = stderr.splitlines()
    if summary and lines:
        lines = lines[:-1]
    problems = []
    for line in lines:
        path, separator, message = line.partition(": ")
        named = separator and (line.startswith("warning: ") or (work / path).exists())
        if not named or "internal error" in message or "Traceback" in line:
            problems.append(f"{step}: stderr: {line[:300]}")
    return problems


def parses(data: bytes) -> bool:
    """Whether Python (this interpreter) parses the source bytes."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escape sequences and the like
            ast.parse(data)
    except (SyntaxError, ValueError):
        return False
    return True


def python_files(root: Path) -> list[str]:
    """Every ``*.py`` under ``root``, relative, sorted."""
    return sorted(str(path.relative_to(root)) for path in root.rglob("*.py") if path.is_file())


def read_sample(path: Path) -> list[str]:
    """A sample list: one relative path per line; ``#`` comments and blank lines skipped."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def choose_sample(
    root: Path,
    files: Sequence[str],
    findings: Sequence[dict[str, object]],
    *,
    size: int,
    fixable: int,
    max_bytes: int,
    seed: int,
) -> list[str]:
    """A reproducible sample of ``size`` files: the ``fixable`` smallest files with a
    finding that has a fix (``findings``: ``check --select ALL --format json`` of the same
    files), filled up with a draw (``seed``) of the other files up to ``max_bytes`` each;
    sizes keep the sweep of the sample short at today's speed."""
    sizes = {relative: (root / relative).stat().st_size for relative in files}
    with_fix = {str(finding["path"]) for finding in findings if finding.get("fix")}
    chosen = sorted(with_fix & set(files), key=lambda relative: (sizes[relative], relative))
    chosen = chosen[:fixable]
    others = sorted(f for f in files if f not in with_fix and sizes[f] <= max_bytes)
    drawn = random.Random(seed).sample(others, min(len(others), size - len(chosen)))
    return sorted([*chosen, *drawn])


def write_sample(path: Path, sample: Sequence[str], header: str) -> None:
    lines = [f"# {line}" for line in header.splitlines()]
    path.write_text("\n".join([*lines, *sample]) + "\n", encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, help="sweep this directory instead of the corpus")
    parser.add_argument("--packages", nargs="+", help="name==version specs (default: pinned)")
    parser.add_argument("--sample", type=Path, help="a list of corpus-relative paths")
    parser.add_argument("--jobs", "-j", type=int, default=os.cpu_count() or 1)
    parser.add_argument(
        "--make-sample",
        type=Path,
        metavar="FILE",
        help="write a sample list instead of sweeping (with --findings, --size, --seed)",
    )
    parser.add_argument(
        "--findings", type=Path, help="check --select ALL --format json of the corpus"
    )
    parser.add_argument("--size", type=int, default=300, help="files in the sample")
    parser.add_argument("--fixable", type=int, default=12, help="files with fixes in it")
    parser.add_argument("--max-bytes", type=int, default=30_000, help="of the other files")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    if args.dir is not None:
        root, files = args.dir, python_files(args.dir)
    else:
        from corpus import PINNED, cache_dir, fetch  # bench/corpus.py, next to this script

        specs = args.packages or [f"{name}=={version}" for name, version in PINNED.items()]
        directories = fetch(specs, cache_dir())
        root = cache_dir() / "src"
        files = [
            str(Path(directory.name) / relative)
            for directory in directories
            for relative in python_files(directory)
        ]
        if args.make_sample is not None:
            findings = json.loads(args.findings.read_text(encoding="utf-8"))
            for finding in findings:  # absolute paths -> relative to the corpus root
                finding["path"] = os.path.relpath(str(finding["path"]), root)
            choice = {
                "size": args.size,
                "fixable": args.fixable,
                "max_bytes": args.max_bytes,
                "seed": args.seed,
            }
            sample = choose_sample(root, files, findings, **choice)
            options = " ".join(f"--{key.replace('_', '-')} {n}" for key, n in choice.items())
            header = (
                f"The sweep's CI sample (tests/test_sweep.py): {len(sample)} files of "
                f"{', '.join(specs)},\nrelative to the unpacked wheels. Made by:\n"
                f"python bench/sweep.py --make-sample FILE --findings F {options}\n"
                "(F: gradfix check --select ALL --format json over the unpacked wheels)."
            )
            write_sample(args.make_sample, sample, header)
            return
        if args.sample is not None:
            files = read_sample(args.sample)
    with tempfile.TemporaryDirectory(prefix="gradfix-sweep-") as work:
        report = sweep(root, files, Path(work), jobs=args.jobs)
    print(report.summary())
    for line in report.notes:
        print(f"  {line}")
    for line in report.problems:
        print(f"  problem: {line}")
    sys.exit(1 if report.problems else 0)


if __name__ == "__main__":
    main()
