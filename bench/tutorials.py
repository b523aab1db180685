"""Precision on user-level code: gradfix over pinned tutorial and course repositories.

    python bench/tutorials.py                 # every repository below, default rules
    python bench/tutorials.py --repos pytorch/examples --show all

Each repository is read from a local git mirror (a git directory without a work tree, as the
``fetch`` tool brings them: ``$GRADFIX_MIRRORS/<owner>+<name>/repo``, default
``/work/.mirror``) and its ``.py`` and ``.ipynb`` files are exported with ``git archive`` at
the PINNED commit below into a cache directory outside the repository (``$GRADFIX_CORPUS``
or ``~/.cache/gradfix-corpus``, under ``tutorials/``); nothing of it is written into the
repository. ``gradfix check --format json`` (the default rules) runs over them and every
finding is compared with the judgements in ``bench/tutorials_judged.json``: a finding is
keyed by repository, path, rule code and the stripped text of its line (not the line number,
so an unrelated edit of the file keeps the verdict). Prints findings, true, false, debatable
and unjudged per rule and per repository, then the unjudged findings (a change that adds
findings shows them here) and the judgements no finding matches any more (a fixed false
positive, or a lost true finding). ``--template`` prints the unjudged findings as entries to
paste into the judgements file. ``docs/precision.md`` records the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

#: owner/name -> the commit whose files are measured (the newest snapshot on 2026-11-23)
PINNED = {
    "pytorch/examples": "77f55b912142e11fcfdf5b530231fb9c52f181e8",
    "d2l-ai/d2l-en": "23d7a5aecceee57d1292c56e90cce307f183bb0a",
    "yunjey/pytorch-tutorial": "0500d3df5a2a8080ccfccbc00aca0eacc21818db",
    "MorvanZhou/PyTorch-Tutorial": "dbe154a9e56635e51c6b0c2ccea8ae36cfb585a7",
    "ShusenTang/Dive-into-DL-PyTorch": "09c8bacc08599eb86236551454ba43b82cb91498",
    "rasbt/LLMs-from-scratch": "28c65cdfbc3338e2e040016eea4b7fdf556e4d57",
    "rasbt/deeplearning-models": "18e046926551378cd691fd871dda0f21dcd272ab",
    "phlippe/uvadlc_notebooks": "0da8037c7abc32f478ff6142acceb72dbcf088ee",
    "mrdbourke/pytorch-deep-learning": "baa27b691617461c173ecf3439793cd8cde74e13",
    "udacity/deep-learning-v2-pytorch": "c9404fc86181fc3f0906b368697268257f348535",
    "bentrevett/pytorch-seq2seq": "b3cd54c72cd6e4e63f672d334c795b4fe744ef92",
    "bentrevett/pytorch-sentiment-analysis": "329f654b2cfaed22fee432569ebd7a2674584f79",
    "karpathy/nanoGPT": "3adf61e154c3fe3fca428ad6bc3818b27a3b8291",
    "Atcold/NYU-DLSP20": "3049c83260ba05700e2ab9b7ed13cdbe5ddba0fd",
    "chenyuntc/pytorch-book": "688951721d11cd3f92440801e1b68b65ae2e439f",
    "dsgiitr/d2l-pytorch": "e84da49a9ea4ba448f4aaf2d18ecd9edafaa2419",
    "L1aoXingyu/code-of-learn-deep-learning-with-pytorch": (
        "ea24810dc26265e85e3eec34e1d091d21202d800"
    ),
    "jcjohnson/pytorch-examples": "0003fcdc606a79951e53bf8f46f8574fa4739f23",
}
JUDGED = Path(__file__).with_name("tutorials_judged.json")
VERDICTS = ("true", "false", "debatable")
SUFFIXES = (".py", ".ipynb")


@dataclass(frozen=True)
class Finding:
    repo: str
    path: str  # inside the repository
    code: str
    text: str  # the stripped source line
    line: int
    cell: int | None

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.repo, self.path, self.code, self.text)

    @property
    def where(self) -> str:
        cell = f" cell {self.cell}" if self.cell is not None else ""
        return f"{self.repo}:{self.path}{cell}:{self.line}"


def mirrors_dir() -> Path:
    return Path(os.environ.get("GRADFIX_MIRRORS", "/work/.mirror"))


def cache_dir() -> Path:
    root = Path(os.environ.get("GRADFIX_CORPUS", Path.home() / ".cache" / "gradfix-corpus"))
    return root / "tutorials"


def export(repo: str, commit: str, root: Path) -> Path | None:
    """The repository's Python files and notebooks at ``commit`` under ``root`` (exported
    once); ``None`` (with a note on stderr) when there is no mirror holding the commit.

    Files are read blob by blob (``git cat-file --batch``): a snapshot may lack its largest
    files (data, images), which ``git archive`` of the whole tree would fail on."""
    target = root / f"{repo.replace('/', '+')}@{commit[:12]}"
    if target.exists():
        return target
    git = ["git", "--git-dir", str(mirrors_dir() / repo.replace("/", "+") / "repo")]
    listing = subprocess.run(
        [*git, "ls-tree", "-r", "-z", commit], capture_output=True, check=False
    )
    if listing.returncode != 0:
        print(f"skipped {repo}: {listing.stderr.decode().strip()}", file=sys.stderr)
        return None
    blobs = {}  # path -> blob id
    for entry in listing.stdout.decode().split("\0"):
        meta, _, path = entry.partition("\t")
        if path.endswith(SUFFIXES) and meta.split(" ")[1:2] == ["blob"]:
            blobs[path] = meta.split(" ")[2]
    request = "".join(f"{blob}\n" for blob in blobs.values()).encode()
    batch = subprocess.run(
        [*git, "cat-file", "--batch"], input=request, capture_output=True, check=True
    )
    partial = target.with_name(target.name + ".part")
    _write_blobs(batch.stdout, list(blobs), partial)
    partial.rename(target)
    return target


def _write_blobs(stream: bytes, paths: list[str], into: Path) -> None:
    """Write each blob of a ``git cat-file --batch`` answer to its path under ``into``."""
    offset = 0
    for path in paths:
        header_end = stream.index(b"\n", offset)
        header = stream[offset:header_end].split()
        offset = header_end + 1
        if header[-1] == b"missing":
            print(f"  missing in the snapshot: {path}", file=sys.stderr)
            continue
        size = int(header[2])
        target = into / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(stream[offset : offset + size])
        offset += size + 1


def scan(directories: dict[str, Path], jobs: int) -> list[Finding]:
    command = ["gradfix", "check", "--no-cache", "-q", "--format", "json", "-j", str(jobs)]
    result = subprocess.run(
        [*command, *map(str, directories.values())], capture_output=True, text=True, check=False
    )
    if result.returncode not in (0, 1, 2) or not result.stdout.strip():
        sys.exit(f"gradfix check failed: {result.stderr.strip()}")
    for line in result.stderr.splitlines():
        print(f"  gradfix: {line}", file=sys.stderr)
    findings = []
    for raw in json.loads(result.stdout):
        repo, directory = _owner(Path(raw["path"]), directories)
        path = Path(raw["path"]).relative_to(directory).as_posix()
        cell = raw.get("cell")
        text = source_line(Path(raw["path"]), raw["line"], cell)
        findings.append(Finding(repo, path, raw["code"], text, raw["line"], cell))
    return findings


def _owner(path: Path, directories: dict[str, Path]) -> tuple[str, Path]:
    for repo, directory in directories.items():
        if path.is_relative_to(directory):
            return repo, directory
    raise ValueError(f"{path} is in none of the exported repositories")


def source_line(path: Path, line: int, cell: int | None) -> str:
    """The stripped text of ``line`` (1-based; inside the notebook cell ``cell``, 1-based)."""
    text = path.read_text(encoding="utf-8", errors="replace")
    if cell is not None:
        source = json.loads(text)["cells"][cell - 1]["source"]
        text = source if isinstance(source, str) else "".join(source)
    lines = text.splitlines()
    return lines[line - 1].strip() if 0 < line <= len(lines) else "?"


def load_judgements() -> dict[tuple[str, str, str, str], dict[str, str]]:
    entries = json.loads(JUDGED.read_text(encoding="utf-8")) if JUDGED.exists() else []
    judged = {}
    for entry in entries:
        if entry["verdict"] not in VERDICTS:
            sys.exit(f"{JUDGED.name}: bad verdict {entry['verdict']!r} for {entry}")
        judged[(entry["repo"], entry["path"], entry["code"], entry["text"])] = entry
    return judged


def table(title: str, rows: dict[str, Counter[str]]) -> None:
    print(f"\n| {title} | findings | true | false | debatable | unjudged |")
    print("|---|---:|---:|---:|---:|---:|")
    total: Counter[str] = Counter()
    for name, counts in sorted(rows.items()):
        total.update(counts)
        cells = " | ".join(str(counts[v]) for v in ("findings", *VERDICTS, "unjudged"))
        print(f"| {name} | {cells} |")
    cells = " | ".join(str(total[v]) for v in ("findings", *VERDICTS, "unjudged"))
    print(f"| **all** | {cells} |")


def report(
    findings: list[Finding],
    judged: dict[tuple[str, str, str, str], dict[str, str]],
    repos: list[str],
) -> list[Finding]:
    by_rule: dict[str, Counter[str]] = defaultdict(Counter)
    by_repo: dict[str, Counter[str]] = {repo: Counter() for repo in repos}
    unjudged = []
    for finding in findings:
        entry = judged.get(finding.key)
        verdict = entry["verdict"] if entry else "unjudged"
        if entry is None:
            unjudged.append(finding)
        for counts in (by_rule[finding.code], by_repo[finding.repo]):
            counts["findings"] += 1
            counts[verdict] += 1
    table("rule", by_rule)
    table("repository", by_repo)
    judged_true = sum(c["true"] for c in by_rule.values())
    if findings:
        print(f"\nprecision: {judged_true}/{len(findings)} findings judged true")
    return unjudged


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repos", nargs="+", default=list(PINNED), choices=list(PINNED))
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--show", choices=("unjudged", "all"), default="unjudged")
    parser.add_argument("--template", action="store_true", help="unjudged findings as JSON")
    args = parser.parse_args()

    root = cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    exported = {repo: export(repo, PINNED[repo], root) for repo in args.repos}
    directories = {repo: path for repo, path in exported.items() if path is not None}
    files = sum(1 for d in directories.values() for p in d.rglob("*") if p.suffix in SUFFIXES)
    print(f"repositories {len(directories)}  files {files}  cache {root}")
    findings = sorted(scan(directories, args.jobs), key=lambda f: (f.repo, f.path, f.line))
    judged = load_judgements()
    unjudged = report(findings, judged, list(directories))
    shown = findings if args.show == "all" else unjudged
    if shown:
        print(f"\n## {'findings' if args.show == 'all' else 'unjudged findings'}")
    for finding in shown:
        verdict = judged.get(finding.key, {}).get("verdict", "unjudged")
        print(f"{finding.where}: {finding.code} [{verdict}] {finding.text}")
    keys = {f.key for f in findings}
    gone = [e for k, e in judged.items() if k not in keys and k[0] in directories]
    if gone:
        print("\n## judged findings no longer reported")
    for entry in gone:
        print(
            f"{entry['repo']}:{entry['path']}: {entry['code']} [{entry['verdict']}] {entry['text']}"
        )
    if args.template:
        template = [
            {
                "repo": f.repo,
                "path": f.path,
                "code": f.code,
                "text": f.text,
                "verdict": "",
                "reason": "",
            }
            for f in unjudged
        ]
        print(json.dumps(template, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
