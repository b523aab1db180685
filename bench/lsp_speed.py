"""How fast the language server answers after an edit (issue 12: ≤ 100 ms for a
5,000-line file after a one-line edit).

    python bench/lsp_speed.py                 # a generated 5,000-line model file
    python bench/lsp_speed.py --file big.py   # any file
    python bench/lsp_speed.py --edits 30
    python bench/lsp_speed.py --in method     # edit a line of a ``forward`` instead

Starts ``python -m gradfix lsp`` and talks to it with the JSON-RPC client of the tests
(``tests/test_lsp.py``): opens the file, then changes one line (a number in a comment-free
statement, alternating) ``--edits`` times, each time measuring wall time from sending
``didChange`` to receiving the ``publishDiagnostics`` of that version (the server checks
again only what the edit can change: ``gradfix.incremental``). Prints the median,
the 90th percentile and the worst, and the findings of the file (so a server that finds
nothing cannot look fast by accident).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from test_lsp import LspClient  # noqa: E402

BLOCK = '''

class Block{n}(nn.Module):
    """A residual block with a gated branch."""

    def __init__(self, dim: int = 64) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.proj = nn.Linear(dim, dim)
        self.gate = nn.Linear(dim, dim)
        self.scale = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(x)
        g = torch.sigmoid(self.gate(h))
        h = F.gelu(self.proj(h)) * g
        h = h * self.scale
        out = x + h
        return out


def train_block{n}(model: nn.Module, data: torch.Tensor, steps: int = 10) -> float:
    opt = torch.optim.SGD(model.parameters(), lr=0.{n}1)
    total = 0.0
    for step in range(steps):
        opt.zero_grad()
        loss = model(data).pow(2).mean()
        loss.backward()
        opt.step()
        total += loss.item()
    w = torch.randn(3, requires_grad=True)
    w.normal_()
    return total
'''


def generated(lines: int) -> str:
    text = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n"
    n = 0
    while text.count("\n") < lines:
        text += BLOCK.format(n=n)
        n += 1
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--file", type=Path, help="the file to edit (default: generated)")
    parser.add_argument("--lines", type=int, default=5000)
    parser.add_argument("--edits", type=int, default=20)
    parser.add_argument(
        "--in",
        dest="where",
        choices=("function", "method"),
        default="function",
        help="edit a training function's line (default) or a line of a module's forward",
    )
    args = parser.parse_args()
    text = args.file.read_text(encoding="utf-8") if args.file else generated(args.lines)
    lines = text.splitlines(keepends=True)
    marker, old = ("lr=0.", "lr=0.") if args.where == "function" else ("h * self.scale", "h * ")
    target = next(i for i, line in enumerate(lines) if marker in line) if not args.file else 0
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model.py"
        path.write_text(text, encoding="utf-8")
        uri = path.as_uri()
        process = subprocess.Popen(
            [sys.executable, "-m", "gradfix", "lsp"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd=tmp,
        )
        client = LspClient(process)
        try:
            client.initialize(Path(tmp))
            start = time.perf_counter()
            client.open(uri, text)
            found = client.diagnostics(uri)
            opened = time.perf_counter() - start
            times = []
            for version in range(2, args.edits + 2):
                edited = list(lines)
                new = f"lr={version}." if args.where == "function" else f"h * {version} * "
                edited[target] = edited[target].replace(old, new, 1)
                start = time.perf_counter()
                client.change(uri, version, "".join(edited))
                client.diagnostics(uri, version)
                times.append(time.perf_counter() - start)
            client.stop()
        finally:
            if process.poll() is None:
                process.kill()
    times.sort()
    p90 = times[min(len(times) - 1, int(len(times) * 0.9))]
    print(f"{len(lines):,} lines, {len(found)} diagnostics; open: {opened * 1000:.0f} ms")
    print(
        f"after a one-line edit ({len(times)} edits): median {statistics.median(times) * 1000:.0f}"
        f" ms, p90 {p90 * 1000:.0f} ms, worst {times[-1] * 1000:.0f} ms (target ≤ 100 ms)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
