"""Verification throughput: seconds per proven fix, amortised over the fixtures; and the
wall time of ``gradfix fix --verify FILE`` on a small training script, cold and warm.

    python bench/verify_speed.py              # every before/after pair, 2 at a time
    python bench/verify_speed.py --jobs 1 --repeat 2
    python bench/verify_speed.py --cli        # fix --verify FILE: cold / warm, 1 fix / batch

``--cli`` runs the command as a user does (a new process each time) on a small training
script with one fix and on one with several (a batch), cold (no warm verifier: the first
run of a session starts the shared fork server and imports torch) and warm (the server
started by the previous run is reused). Target (issue 14): <= 3 s wall warm.

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


def rule_code(fixture: Path) -> str:
    """The code of the rule whose fix the fixture is (its directory names the codemod)."""
    from gradfix.codemods import ALL_RULES

    codes = {rule.__module__.rsplit(".", 1)[-1]: rule.code for rule in ALL_RULES}
    return codes[fixture.parent.name]


def prove(pair: tuple[Path, Path]) -> str:
    before, after = pair
    verdict = verify_sources(
        before.read_text(encoding="utf-8"),
        after.read_text(encoding="utf-8"),
        filename=before.name,
        source_dir=str(before.parent),
        rules=(rule_code(before),),
    )
    return verdict.status


ONE_FIX = """import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(16, 4), torch.randn(16, 1)
running = 0
for step in range(5):
    opt.zero_grad()
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    opt.step()
    running += loss
print(running)
"""
# Three more findings of three rules in the same script: a batch of four fixes.
BATCH = ONE_FIX.replace(
    "running = 0\n",
    "running = 0\nscale = torch.tensor([2, 3], requires_grad=True)\n"
    "w = torch.randn(2, requires_grad=True)\nw.normal_()\n",
).replace(
    "loss = ((model(x) - y) ** 2).mean()",
    "loss = ((model(x) - y) ** 2).mean() + torch.tensor([w[0], w[1]]).sum()",
)


def cli_timings(repeat: int) -> list[tuple[str, str, float, str]]:
    """(case, cold|warm, wall seconds, summary line) of ``gradfix fix --verify FILE``."""
    import subprocess
    import sys
    import tempfile

    rows = []
    with tempfile.TemporaryDirectory() as home:
        runtime = Path(home, "run")
        runtime.mkdir(mode=0o700)
        env = dict(os.environ, XDG_RUNTIME_DIR=str(runtime), GRADFIX_VERIFY_DAEMON="1")
        for case, source in (("one fix", ONE_FIX), ("batch", BATCH)):
            script = Path(home, f"{case.replace(' ', '_')}.py")
            script.write_text(source, encoding="utf-8")
            command = [sys.executable, "-m", "gradfix", "fix", "--verify", "--no-cache"]
            for state in ["cold"] + ["warm"] * repeat:
                if state == "cold":
                    _stop_shared_server(env)
                start = time.perf_counter()
                done = subprocess.run([*command, str(script)], capture_output=True, text=True,
                                      env=env, check=False)  # fmt: skip
                wall = time.perf_counter() - start
                rows.append((case, state, wall, done.stderr.strip().splitlines()[-1]))
        _stop_shared_server(env)
    return rows


def _stop_shared_server(env: dict[str, str]) -> None:
    import subprocess
    import sys

    stop = "from gradfix.verify.process import shutdown_shared_server as s; s()"
    subprocess.run([sys.executable, "-c", stop], env=env, check=False)
    time.sleep(0.5)  # let it close its socket


def print_cli(repeat: int) -> None:
    print("gradfix fix --verify FILE (a new process per run; warm: shared verifier running)")
    for case, state, wall, summary in cli_timings(repeat):
        print(f"  {case:8} {state:5} {wall:6.2f} s   {summary}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--repeat", type=int, default=1, help="passes over the fixtures")
    parser.add_argument("--cli", action="store_true", help="time fix --verify FILE instead")
    args = parser.parse_args()
    if args.cli:
        print_cli(max(2, args.repeat))
        return

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
