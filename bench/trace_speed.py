"""Overhead of ``gradfix trace`` on a small training loop: traced time / plain time.

    python bench/trace_speed.py                 # 300 steps of a 3-layer MLP, 3 repeats
    python bench/trace_speed.py --steps 1000 --repeat 5

The loop (below, written to a temporary file) times itself, so the figures are the
training loop alone, without interpreter start-up and ``import torch`` (which tracing does
not slow down); the whole command's wall time is printed beside it. The best of the
repeats counts. Target (issue 14): the traced loop takes at most 2x the plain one.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LOOP = """
import sys, time
import torch

torch.manual_seed(0)
torch.set_num_threads(1)  # steadier figures on a shared machine
model = torch.nn.Sequential(
    torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.Tanh(),
    torch.nn.Linear(64, 10),
)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
x, y = torch.randn(64, 32), torch.randint(0, 10, (64,))
start = time.perf_counter()
for step in range(int(sys.argv[1])):
    optimizer.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
print(f"LOOP {time.perf_counter() - start:.4f}")
"""


def run(command: list[str]) -> tuple[float, float]:
    """(loop seconds, wall seconds) of one run of ``command``."""
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - start
    loop = next(line for line in done.stdout.splitlines() if line.startswith("LOOP "))
    return float(loop.split()[1]), wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=3)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as home:
        script = Path(home, "loop.py")
        script.write_text(LOOP, encoding="utf-8")
        plain = [sys.executable, str(script), str(options.steps)]
        traced = [sys.executable, "-m", "gradfix", "trace", "--", *plain]
        results = {
            name: min(run(command) for _ in range(options.repeat))
            for name, command in (("plain", plain), ("traced", traced))
        }
    print(f"{options.steps} training steps, best of {options.repeat}:")
    for name, (loop, wall) in results.items():
        print(f"  {name:<7} loop {loop:7.3f} s   whole command {wall:7.3f} s")
    ratio = results["traced"][0] / results["plain"][0]
    print(f"overhead of the traced loop: {ratio:.2f}x (target <= 2x)")


if __name__ == "__main__":
    main()
