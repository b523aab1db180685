"""Ray against the local process pool, and throughput per simulated node (issue 15).

    python bench/scale.py                      # 600 files of transformers, seed 0
    python bench/scale.py --files 1200 --fix   # fix previews instead of checks
    python bench/scale.py --paths src/         # any files
    python bench/scale.py --no-verify          # without the verification batch
    python bench/scale.py --repeat 150,300,600 # one finding repeated N times (issue 33)

Each row lints the same files with the cache off, in this process (no start-up counted
in the figures, which the table gives apart):

- local `-j 2`: the process pool of `gradfix check -j 2`;
- Ray, 2 CPUs: a local Ray of 2 CPUs, started before the clock (a migration runs on a
  cluster that is up); the driver reads the files and the workers lint;
- Ray on 1, 2 and 3 simulated nodes of one CPU each (`ray.cluster_utils.Cluster`, a head
  without CPUs): files per second, and per node. The nodes share this machine's cores,
  so past its core count the figure measures the machine, not Ray.

Then a verification batch: every fix of the fixtures' ``*.before.py`` files, proven with
the script harness (each before/after run in a subprocess) by the local verifier (two fixes
at once) and on a local Ray of 2 CPUs (the batch's directory shipped once, each file's
fixes judged on a worker), start-up apart as above.

The results of every row are compared with the local row: a row that differs fails.

``--repeat`` measures instead how the time of one file grows with its findings: a file of
N lines ``w.data.add_(1)`` (one fix) and a notebook of N such cells (N fixes), through
``gradfix check`` (code frames included) and ``gradfix fix`` (the diff preview, no
verification), in this process with the cache off; it prints seconds per N and per
finding, which stays flat when the work is linear.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from speed import PINNED  # noqa: E402

from gradfix.ray_executor import RayExecutor, import_ray  # noqa: E402
from gradfix.registry import select_rules  # noqa: E402
from gradfix.runner import FileResult, RunOptions, process_paths  # noqa: E402


def corpus_files(paths: Sequence[str], count: int, seed: int) -> list[str]:
    if paths:
        found: list[str] = []
        for path in map(Path, paths):
            found += map(str, sorted(path.rglob("*.py")) if path.is_dir() else [path])
        return found
    import corpus

    (root,) = corpus.fetch([f"transformers=={PINNED['transformers']}"], corpus.cache_dir())
    every = sorted(map(str, (root / "transformers").rglob("*.py")))
    return sorted(random.Random(seed).sample(every, min(count, len(every))))


def answers(files: list[FileResult]) -> list[tuple[object, ...]]:
    return [(r.path, [dataclasses.astuple(f) for f in r.findings], r.fixed, r.error) for r in files]


def timed(run: Callable[[], list[FileResult]]) -> tuple[float, float, list[FileResult]]:
    """Wall and CPU seconds (this process and its finished children) of ``run``."""
    before = os.times()
    start = time.perf_counter()
    results = run()
    wall = time.perf_counter() - start
    after = os.times()
    cpu = sum(after[:4]) - sum(before[:4])
    return wall, cpu, results


def verification_batch(directory: Path) -> list[str]:
    """Copies every fixture with a fix into ``directory`` (one file per fixture)."""
    names = []
    for before in sorted((ROOT / "fixtures").glob("*/*.before.py")):
        name = f"{before.parent.name}__{before.name.removesuffix('.before.py')}.py"
        shutil.copyfile(before, directory / name)
        names.append(str(directory / name))
    return names


def verify_rows(jobs: int) -> None:
    """The verification batch's table: local verifier against Ray, 2 CPUs."""
    from gradfix.cli.proving import harness_limits, verify_run
    from gradfix.proof import DEFAULT_MAX_STEPS

    options = RunOptions(rules=select_rules(["ALL"]), fix=True, unsafe_fixes=True)
    limits = harness_limits(120.0, DEFAULT_MAX_STEPS)
    with tempfile.TemporaryDirectory(prefix="gradfix-scale-") as tmp:
        files = verification_batch(Path(tmp))
        run = process_paths(files, options, jobs=jobs)
        fixes = sum(r.applied_count for r in run.files)
        print()
        print(f"verification batch: {len(files)} fixture files, {fixes} fixes (script harness)")
        print()
        print("| run | wall s | fixes/s | vs local | start-up s |")
        print("|---|---:|---:|---:|---:|")
        local_wall, local = timed_verdicts(lambda: verify_run(run, options, limits, jobs=jobs))
        rate = fixes / local_wall
        print(f"| local, {jobs} at once | {local_wall:.2f} | {rate:.2f} | 1.00x | - |")
        start = time.perf_counter()
        with RayExecutor(num_cpus=2, ship=tmp) as executor:
            startup = time.perf_counter() - start
            run = process_paths(files, options, executor=executor)
            wall, remote = timed_verdicts(
                lambda: verify_run(run, options, limits, executor=executor)
            )
    if remote != local:
        sys.exit("verification on Ray, 2 CPUs: verdicts differ from the local verifier")
    print(
        f"| Ray, 2 CPUs (local) | {wall:.2f} | {fixes / wall:.2f} | {wall / local_wall:.2f}x | "
        f"{startup:.1f} |"
    )


def timed_verdicts(run: Callable[[], dict[str, list[object]]]) -> tuple[float, list[str]]:
    """Wall seconds of ``run`` and its verdicts' lines (for comparing two runs)."""
    start = time.perf_counter()
    verdicts = run()
    wall = time.perf_counter() - start
    return wall, [v.line() for path in sorted(verdicts) for v in verdicts[path]]  # type: ignore[attr-defined]


def repeated_finding(count: int) -> str:
    """``count`` updates of a leaf through ``.data``, one per line (GF205 each)."""
    return "import torch\n\nw = torch.zeros(3, requires_grad=True)\n" + "w.data.add_(1)\n" * count


def repeated_cells(count: int) -> str:
    """A notebook: one cell making the leaf, then ``count`` cells updating it, each fixed
    on its own (a fix never moves code across cells)."""
    import json

    def cell(source: str) -> dict[str, object]:
        return {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": []} | {
            "source": source
        }

    cells = [cell("import torch\nw = torch.zeros(3, requires_grad=True)")]
    cells += [cell("w.data.add_(1)\nprint('step')") for _ in range(count)]
    return json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5})


def repeat_rows(counts: Sequence[int]) -> None:
    """Seconds of ``check`` and ``fix`` per N repeated findings (``--repeat``)."""
    from typer.testing import CliRunner

    from gradfix.cli import app

    commands = {
        "check": ["check", "--no-cache", "--select", "ALL"],
        "fix": ["fix", "--no-cache", "--no-verify", "--select", "ALL"],
    }
    print("| N | file | command | s | ms per finding |")
    print("|---:|---|---|---:|---:|")
    with tempfile.TemporaryDirectory() as directory:
        for count in counts:
            for name, text in (
                ("m.py", repeated_finding(count)),
                ("m.ipynb", repeated_cells(count)),
            ):
                path = Path(directory) / name
                path.write_text(text)
                for command, arguments in commands.items():
                    start = time.perf_counter()
                    result = CliRunner().invoke(app, [*arguments, str(path)])
                    wall = time.perf_counter() - start
                    if result.exit_code != 1:
                        sys.exit(f"{command} {name}, N = {count}: exit {result.exit_code}")
                    print(
                        f"| {count} | {name} | {command} | {wall:.2f} | {1000 * wall / count:.2f} |"
                    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--paths", nargs="*", default=[])
    parser.add_argument("--files", type=int, default=600, help="sample size (default 600)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--fix", action="store_true", help="fix previews (unsafe fixes too)")
    parser.add_argument("--nodes", type=int, default=3, help="simulated nodes, up to (3)")
    parser.add_argument(
        "--no-verify", dest="verify", action="store_false", help="skip the verification batch"
    )
    parser.add_argument(
        "--repeat",
        metavar="N,N,...",
        help="instead: seconds of check and fix for one finding repeated N times",
    )
    args = parser.parse_args()
    if args.repeat:
        repeat_rows([int(count) for count in args.repeat.split(",")])
        return 0
    ray = import_ray()
    from ray.cluster_utils import Cluster

    files = corpus_files(args.paths, args.files, args.seed)
    lines = sum(Path(f).read_bytes().count(b"\n") for f in files)
    options = RunOptions(rules=select_rules(), fix=args.fix, unsafe_fixes=args.fix)
    print(
        f"{len(files):,} files, {lines:,} lines; {'fix' if args.fix else 'check'}; "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    print()
    print("| run | wall s | files/s | vs local | start-up s |")
    print("|---|---:|---:|---:|---:|")
    local_wall, _, local = timed(lambda: process_paths(files, options, jobs=2).files)
    reference = answers(local)
    print(f"| local `-j 2` | {local_wall:.2f} | {len(files) / local_wall:.0f} | 1.00x | - |")

    start = time.perf_counter()
    with RayExecutor(num_cpus=2) as executor:
        startup = time.perf_counter() - start
        wall, _, results = timed(lambda: process_paths(files, options, executor=executor).files)
    if answers(results) != reference:
        sys.exit("Ray, 2 CPUs: results differ from the local executor")
    print(
        f"| Ray, 2 CPUs (local) | {wall:.2f} | {len(files) / wall:.0f} | "
        f"{wall / local_wall:.2f}x | {startup:.1f} |"
    )
    for count in range(1, args.nodes + 1):
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0}, connect=False)
        for _ in range(count):
            cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False, logging_level="ERROR")
        try:
            with RayExecutor() as executor:
                wall, _, results = timed(
                    lambda: process_paths(files, options, executor=executor).files  # noqa: B023
                )
        finally:
            ray.shutdown()
            cluster.shutdown()
        if answers(results) != reference:
            sys.exit(f"{count} nodes: results differ from the local executor")
        rate = len(files) / wall
        print(
            f"| Ray, {count} simulated node{'s' if count > 1 else ''} of 1 CPU | {wall:.2f} | "
            f"{rate:.0f} ({rate / count:.0f} per node) | {wall / local_wall:.2f}x | - |"
        )
    again, _, _ = timed(lambda: process_paths(files, options, jobs=2).files)
    print(
        f"| local `-j 2` again (drift) | {again:.2f} | {len(files) / again:.0f} | "
        f"{again / local_wall:.2f}x | - |"
    )
    if args.verify:
        verify_rows(jobs=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
