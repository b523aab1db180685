"""Run gradfix over real PyTorch code from PyPI wheels and summarise the findings.

    python bench/corpus.py                       # transformers, timm, diffusers
    python bench/corpus.py --packages timm --sample 50 --seed 1

The wheels are downloaded with ``pip download --no-deps`` into a cache directory outside
the repository (``$GRADFIX_CORPUS`` or ``~/.cache/gradfix-corpus``) and unpacked there;
nothing is written into the repository. Prints files, lines, seconds, errors, findings per
rule and, for judging precision, a reproducible random sample of findings per rule with
the source line of each (``docs/precision.md`` records the judgements).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
import zipfile
from collections import Counter, defaultdict
from pathlib import Path

DEFAULT_PACKAGES = ["transformers", "timm", "diffusers"]
#: the versions the figures in docs/ and the sweep's sample (bench/corpus_sample.txt) are of
PINNED = {"transformers": "5.23.0", "timm": "1.0.31", "diffusers": "0.42.1"}


def cache_dir() -> Path:
    return Path(os.environ.get("GRADFIX_CORPUS", Path.home() / ".cache" / "gradfix-corpus"))


def sampled_files(paths: list[Path], sample: int = 0, seed: int = 0) -> list[Path]:
    """The ``*.py`` files under ``paths`` (none given: the pinned transformers package,
    fetched once), sorted; with ``sample``, a seeded random sample of that many (the same
    seed, the same files)."""
    if not paths:
        unpacked = fetch([f"transformers=={PINNED['transformers']}"], cache_dir())[0]
        paths = [unpacked / "transformers"]
    files = sorted(p for root in paths for p in root.rglob("*.py"))
    if sample:
        files = sorted(random.Random(seed).sample(files, min(sample, len(files))))
    return files


def fetch(packages: list[str], root: Path) -> list[Path]:
    """Download and unpack each package's wheel once; return the unpacked directories.

    A package is a name (any version already there, else the latest) or ``name==version``.
    Raises :class:`subprocess.CalledProcessError` when pip cannot download them."""
    wheels = root / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    missing = [p for p in packages if not list(wheels.glob(_wheel_pattern(p)))]
    if missing:
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(wheels)]
        subprocess.run([*command, *missing], check=True)
    unpacked = []
    for package in packages:
        wheel = sorted(wheels.glob(_wheel_pattern(package)))[-1]
        target = root / "src" / wheel.stem
        if not target.exists():
            with zipfile.ZipFile(wheel) as archive:
                archive.extractall(target)
        unpacked.append(target)
    return unpacked


def _wheel_pattern(package: str) -> str:
    """``transformers==5.23.0`` -> ``transformers-5.23.0-*.whl``."""
    name, _, version = package.partition("==")
    return f"{name.replace('-', '_')}-{version or '*'}-*.whl"


def scan(directories: list[Path], jobs: int) -> tuple[list[dict[str, object]], str, float]:
    start = time.perf_counter()
    command = ["gradfix", "check", "--no-cache", "--format", "json", "-j", str(jobs)]
    command += ["--select", "ALL"]
    result = subprocess.run(
        [*command, *map(str, directories)], capture_output=True, text=True, check=False
    )
    elapsed = time.perf_counter() - start
    if result.returncode not in (0, 1, 2):
        sys.exit(f"gradfix check failed: {result.stderr.strip()}")
    return json.loads(result.stdout or "[]"), result.stderr, elapsed


def count_lines(directories: list[Path]) -> tuple[int, int]:
    files = lines = 0
    for directory in directories:
        for path in directory.rglob("*.py"):
            files += 1
            with path.open("rb") as handle:
                lines += sum(1 for _ in handle)
    return files, lines


def source_line(path: str, line: int) -> str:
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
        return text[line - 1].strip()
    except (OSError, IndexError):
        return "?"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--packages", nargs="+", default=DEFAULT_PACKAGES)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--sample", type=int, default=50, help="findings shown per rule")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    root = cache_dir()
    directories = fetch(args.packages, root)
    files, lines = count_lines(directories)
    findings, errors, elapsed = scan(directories, args.jobs)
    error_lines = [line for line in errors.splitlines() if ": " in line and "note:" not in line]

    print(f"corpus: {', '.join(d.name for d in directories)}")
    print(f"files {files}  lines {lines}  seconds {elapsed:.1f}  errors {len(error_lines)}")
    for line in error_lines[:20]:
        print(f"  error: {line}")
    by_rule: dict[str, list[dict[str, object]]] = defaultdict(list)
    for finding in findings:
        by_rule[str(finding["code"])].append(finding)
    counts = Counter({code: len(items) for code, items in by_rule.items()})
    summary = ", ".join(f"{code} {n}" for code, n in sorted(counts.items()))
    print(f"findings per rule: {summary or 'none'}")
    rng = random.Random(args.seed)
    for code, items in sorted(by_rule.items()):
        sample = items if len(items) <= args.sample else rng.sample(items, args.sample)
        print(f"\n## {code}: {len(items)} findings, {len(sample)} shown")
        for item in sorted(sample, key=lambda f: (str(f["path"]), int(f["line"]))):  # type: ignore[call-overload]
            path, line = str(item["path"]), int(item["line"])  # type: ignore[call-overload]
            print(f"{path}:{line}: {source_line(path, line)}")


if __name__ == "__main__":
    main()
