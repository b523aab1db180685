"""Verification throughput: seconds per proven fix, amortised over the fixtures.

    python bench/verify_speed.py              # every before/after pair, 2 at a time
    python bench/verify_speed.py --jobs 1 --repeat 2

Each pair is a fix to prove: BEFORE and AFTER are executed in runner processes forked
from a server that imported torch once (``gradfix.verify.process``), traced, and, where a
reference gradient is missing, estimated by finite differences. Prints the fork server's
start-up, the wall time of all pairs, the amortised seconds per fix and the verdicts.
Target (issue 4): <= 0.3 s per fix amortised on 2 cores.
"""

from __future__ import annotations

import argparse
import os
import resource
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from gradfix.verify import shutdown_fork_server, verify_sources

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def pairs() -> list[tuple[Path, Path]]:
    found = []
    for before in sorted(FIXTURES.glob("*/*.before.py")):
        after = before.with_name(before.name.replace(".before.py", ".after.py"))
        if after.exists():
            found.append((before, after))
    return found


def prove(pair: tuple[Path, Path]) -> str:
    before, after = pair
    verdict = verify_sources(
        before.read_text(encoding="utf-8"),
        after.read_text(encoding="utf-8"),
        filename=before.name,
        source_dir=str(before.parent),
    )
    return verdict.status


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--repeat", type=int, default=1, help="passes over the fixtures")
    args = parser.parse_args()

    work = pairs() * args.repeat
    start = time.perf_counter()
    # warm-up: the fork server imports torch once, before the first runner is forked
    verify_sources("import torch\n", "import torch\n", filename="warmup.py")
    startup = time.perf_counter() - start
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        verdicts = Counter(pool.map(prove, work))
    wall = time.perf_counter() - start
    shutdown_fork_server()
    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"fixes {len(work)}  jobs {args.jobs}  start-up (fork server, torch) {startup:.2f} s")
    print(f"wall {wall:.1f} s  amortised {wall / max(1, len(work)):.3f} s per fix")
    print(f"amortised incl. start-up {(wall + startup) / max(1, len(work)):.3f} s per fix")
    print(f"peak RSS of one runner {peak_mb:.0f} MB")
    print("verdicts: " + ", ".join(f"{k} {v}" for k, v in sorted(verdicts.items())))


if __name__ == "__main__":
    main()
