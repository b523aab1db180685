"""Same findings and fixes before and after a change to the engine or the rules.

Issue 12 moves every rule's detection from LibCST to ``ast``; the findings and fixes must
stay the same, byte for byte (a finding that changes is a finding gained and judged, never
one lost). This script runs gradfix as it is at a git ref (default ``main``) and as it is
in the working tree, on the same sources, in two subprocesses, and prints every
difference: a finding lost or gained (code, line, column, message, fix summary) and a
fixed text that differs.

    python bench/port_check.py                          # every rule, the repository's code
    python bench/port_check.py --select GF201,GF205     # the rules being ported
    python bench/port_check.py --corpus ~/.cache/gradfix-corpus/src --sample 400

Sources: the fixtures (before, after, clean), every rule's VALID and INVALID examples,
``bench/realworld`` (bug and fixed), ``tests/data``; with ``--corpus``, the ``*.py``
files under it (``--sample N`` takes a seeded random sample). Exit 0: no difference;
1: differences (listed); 2: an error.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tarfile
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: runs in a subprocess with the gradfix under test first on sys.path
_WORKER = r"""
import json, sys, textwrap
import gradfix
assert gradfix.__path__[0].startswith(sys.path[0]), gradfix.__path__  # the tree under test
from gradfix.engine import SourceError, lint_source
from gradfix.registry import all_rules

select = set(sys.argv[1].split(",")) if sys.argv[1] else None
rules = [r for r in all_rules() if select is None or r.code in select]
unsafe = sys.argv[2] == "1"
sources = json.load(sys.stdin)
examples = {}
for rule in all_rules():
    for kind in ("VALID", "INVALID"):
        for index, example in enumerate(getattr(rule, kind)):
            code = textwrap.dedent(example.code).lstrip("\n")
            examples[f"<{rule.code} {kind} {index}>"] = code
sources.update(examples)
out = {}
for name, text in sorted(sources.items()):
    try:
        result = lint_source(text, rules=rules, path=name, fix=True, unsafe_fixes=unsafe)
    except SourceError as error:
        out[name] = {"error": str(error)}
        continue
    out[name] = {
        "findings": [f.to_dict(name) for f in result.findings],
        "fixed": result.source if result.source != text else None,
        "crashes": [c.line() for c in result.crashes],
    }
json.dump(out, sys.stdout)
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ref", default="main", help="the git ref to compare with")
    parser.add_argument("--select", default="", help="rule codes, comma-separated (all)")
    parser.add_argument("--corpus", type=Path, action="append", default=[])
    parser.add_argument("--sample", type=int, default=0, help="files of the corpus (0: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--unsafe", action="store_true", help="apply unsafe fixes too")
    args = parser.parse_args()
    sources = _sources(args.corpus, args.sample, args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        try:
            old_path = _materialise(args.ref, Path(tmp))
        except subprocess.CalledProcessError as error:
            print(f"port_check: cannot read {args.ref}: {error}", file=sys.stderr)
            return 2
        old = _run(old_path, sources, args.select, args.unsafe)
        new = _run(ROOT / "src", sources, args.select, args.unsafe)
    differences = _compare(old, new)
    for line in differences:
        print(line)
    findings = sum(len(v.get("findings", [])) for v in new.values())
    print(
        f"{len(new)} sources, {findings} findings now; "
        f"{len(differences)} difference(s) against {args.ref}"
    )
    return 1 if differences else 0


def _sources(corpora: list[Path], sample: int, seed: int) -> dict[str, str]:
    paths = [
        *sorted((ROOT / "fixtures").rglob("*.py")),
        *sorted((ROOT / "bench" / "realworld").rglob("*.py")),
        *sorted((ROOT / "tests" / "data").rglob("*.py")),
    ]
    corpus: list[Path] = []
    for directory in corpora:
        corpus.extend(sorted(directory.expanduser().rglob("*.py")))
    if sample and len(corpus) > sample:
        corpus = sorted(random.Random(seed).sample(corpus, sample))
    texts = {}
    for path in [*paths, *corpus]:
        try:
            texts[str(path)] = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
    return texts


def _materialise(ref: str, tmp: Path) -> Path:
    """gradfix as it is at ``ref``, importable from the returned directory (``codemods/``
    placed as ``gradfix/codemods`` as the installed package has it)."""
    archive = tmp / "ref.tar"
    with archive.open("wb") as out:
        subprocess.run(
            ["git", "-C", str(ROOT), "archive", ref, "src", "codemods"], stdout=out, check=True
        )
    with tarfile.open(archive) as tar:
        tar.extractall(tmp, filter="data")
    os.replace(tmp / "codemods", tmp / "src" / "gradfix" / "codemods")
    return tmp / "src"


def _run(src: Path, sources: dict[str, str], select: str, unsafe: bool) -> dict[str, dict]:
    env = {**os.environ, "PYTHONPATH": str(src), "GRADFIX_VERIFY_DAEMON": "0"}
    code = textwrap.dedent(_WORKER)
    # ``-c`` puts the current directory first on sys.path: run from the tree's parent so
    # ``gradfix`` resolves to ``src``'s (PYTHONPATH comes before site-packages and the
    # editable install's finder).
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import sys; sys.path.insert(0, {str(src)!r})\n{code}",
            select,
            "1" if unsafe else "0",
        ],
        input=json.dumps(sources),
        capture_output=True,
        text=True,
        env=env,
        cwd=src,
    )
    if result.returncode != 0:
        raise SystemExit(f"port_check: gradfix from {src} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout)


def _compare(old: dict[str, dict], new: dict[str, dict]) -> list[str]:
    lines = []
    for name in sorted(set(old) | set(new)):
        before, after = old.get(name, {}), new.get(name, {})
        if before.get("error") != after.get("error"):
            lines.append(f"{name}: error {before.get('error')!r} -> {after.get('error')!r}")
        old_findings = {json.dumps(f, sort_keys=True) for f in before.get("findings", [])}
        new_findings = {json.dumps(f, sort_keys=True) for f in after.get("findings", [])}
        lines.extend(f"{name}: LOST {f}" for f in sorted(old_findings - new_findings))
        lines.extend(f"{name}: GAINED {f}" for f in sorted(new_findings - old_findings))
        if before.get("fixed") != after.get("fixed"):
            lines.append(f"{name}: the fixed text differs")
        if before.get("crashes") != after.get("crashes"):
            lines.append(f"{name}: crashes {before.get('crashes')} -> {after.get('crashes')}")
    return lines


if __name__ == "__main__":
    sys.exit(main())
