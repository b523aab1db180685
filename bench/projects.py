"""Projects with several bugs at once: are the correct fixes written within three runs?

    python bench/projects.py                 # every project under bench/projects/
    python bench/projects.py --runs 3 --trace  # also `trace --write -- python <script>`

Each project is a folder of files as a new user writes them (``planted/``: four files and
a notebook with 12 planted bugs, ``BUGS.md``) and an ``EXPECTED.json`` listing the fixes
gradfix offers there and whether each is correct. On a fresh copy, ``gradfix fix --write
--unsafe-fixes .`` runs up to ``--runs`` times (a user running it again after each
write); after each run the bench reports the verdict lines (verified / rejected /
unverified) and which expected fixes are in place. The figures: correct fixes written,
correct fixes ever rejected (must be 0), a notebook fix with a verdict.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent / "projects"
GRADFIX = (sys.executable, "-m", "gradfix")
VERDICT = re.compile(
    r"^(?P<file>[^:\s]+):(?:cell (?P<cell>\d+):line )?(?P<line>\d+):(?:col )?\d+: "
    r"(?P<code>GF\d+) (?P<status>verified|rejected|unverified):"
)


def key(entry: dict) -> tuple:
    return (entry["file"], entry.get("cell"), int(entry["line"]), entry["code"])


def findings(work: Path) -> set[tuple]:
    done = subprocess.run([*GRADFIX, "check", "--select", "ALL", "--no-cache", "--format",
                           "json", "."], cwd=work, capture_output=True, text=True)  # fmt: skip
    found = set()
    for f in json.loads(done.stdout or "[]"):
        found.add((Path(f["path"]).name, f.get("cell"), f["line"], f["code"]))
    return found


def measure(project: Path, runs: int, timeout: float) -> dict:
    expected = json.loads((project / "EXPECTED.json").read_text(encoding="utf-8"))["fixes"]
    with tempfile.TemporaryDirectory(prefix="gradfix-project-") as temp:
        work = Path(temp) / project.name
        shutil.copytree(project, work, ignore=shutil.ignore_patterns("EXPECTED.json"))
        open_before = findings(work)
        history = []
        rejected: set[tuple] = set()
        verdicts_seen: set[tuple] = set()
        for run in range(1, runs + 1):
            done = subprocess.run([*GRADFIX, "fix", "--write", "--unsafe-fixes", "--no-cache",
                                   "."], cwd=work, capture_output=True, text=True,
                                  timeout=timeout)  # fmt: skip
            lines = done.stderr.splitlines()
            statuses: dict[str, int] = {}
            for line in lines:
                match = VERDICT.match(line)
                if match is None:
                    continue
                statuses[match["status"]] = statuses.get(match["status"], 0) + 1
                cell = int(match["cell"]) if match["cell"] else None
                where = (match["file"], cell, int(match["line"]), match["code"])
                verdicts_seen.add(where)
                if match["status"] == "rejected":
                    rejected.add(where)
            left = findings(work)
            history.append({"run": run, "verdicts": statuses, "summary": lines[-1:] or [""],
                            "open": len(left)})  # fmt: skip
    fixed = [e for e in expected if key(e) in open_before and key(e) not in left]
    correct = [e for e in expected if e["correct"] and e.get("offered", True)]
    notebook = [e for e in expected if e["file"].endswith(".ipynb")]
    return {
        "project": project.name,
        "correct_fixes": len(correct),
        "correct_written": sum(1 for e in fixed if e["correct"]),
        "correct_rejected": sum(1 for e in correct if key(e) in rejected),
        "notebook_with_verdict": sum(1 for e in notebook if key(e) in verdicts_seen),
        "notebook_fixes": len(notebook),
        "not_written": [
            f"{e['file']}:{e['line']} {e['code']}" for e in correct if e not in fixed
        ],  # fmt: skip
        "runs": history,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    results = []
    for project in sorted(p for p in ROOT.iterdir() if (p / "EXPECTED.json").is_file()):
        result = measure(project, args.runs, args.timeout)
        results.append(result)
        for run in result["runs"]:
            print(f"{result['project']} run {run['run']}: verdicts {run['verdicts']}, "
                  f"{run['open']} findings open; {run['summary'][0][:120]}")  # fmt: skip
        print(f"{result['project']}: correct fixes written {result['correct_written']}/"
              f"{result['correct_fixes']}, correct fixes rejected "
              f"{result['correct_rejected']}, notebook fixes with a verdict "
              f"{result['notebook_with_verdict']}/{result['notebook_fixes']}; not written: "
              f"{', '.join(result['not_written']) or 'none'}")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(results, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
