"""How fast the language server answers after an edit (issue 32: ≤ 50 ms median for a
5,000-8,000-line real file, an edit anywhere).

    python bench/lsp_speed.py                         # a generated 5,000-line model file
    python bench/lsp_speed.py --file modeling_utils.py --file vision_transformer.py
    python bench/lsp_speed.py --file big.py --edits 30 --kind method --kind module
    python bench/lsp_speed.py --pinned /tmp/pinned    # the pinned real files (below)

Starts ``python -m gradfix lsp`` and talks to it with the JSON-RPC client of the tests
(``tests/test_lsp.py``). It measures the wall time from spawning the server to the answer
to ``initialize``, then opens each file (``didOpen`` to its diagnostics), then, for each
*kind* of edit, sends ``--edits`` versions of the file and measures from sending
``didChange`` to receiving the ``publishDiagnostics`` of that version:

- ``function``: a line typed inside the body of the file's largest top-level function;
- ``method``: a line typed inside a method of the file's largest top-level class (the
  method in the middle of the class);
- ``module``: a module-level line (``name = value``) typed between two top-level
  statements in the middle of the file.

Each version is the original text with the typed line ``gradfix_bench_edit = N`` (N the
version) inserted, or, every other version, the original text again (the line deleted),
so edits insert, change and delete lines; the bench checks that every text it sends
differs from the one before and that the typed line is where the kind says (an edit that
changes nothing is an error, not a fast answer). It prints the median and the 90th
percentile per kind, and each file's number of diagnostics (a server that finds nothing
cannot look fast by accident).

The pinned real files (issue 32; not in this repository, get them with pip)::

    pip download --no-deps -d /tmp/pinned transformers==5.24.0 timm==1.0.31 diffusers==0.42.1
    cd /tmp/pinned && for w in *.whl; do unzip -o -q "$w"; done

    transformers/modeling_utils.py          5,306 lines (a 3,969-line class)
    timm/models/vision_transformer.py       5,308 lines
    diffusers/loaders/lora_pipeline.py      7,708 lines

``--pinned DIR`` benches these three under DIR and checks their line counts (another
version is another file: the figures in docs/speed.md are for these).
"""

from __future__ import annotations

import argparse
import ast
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from test_lsp import LspClient  # noqa: E402

#: the pinned files of ``--pinned``: path under the directory, package version, lines
PINNED = (
    ("transformers/modeling_utils.py", "transformers 5.24.0", 5306),
    ("timm/models/vision_transformer.py", "timm 1.0.31", 5308),
    ("diffusers/loaders/lora_pipeline.py", "diffusers 0.42.1", 7708),
)
KINDS = ("function", "method", "module")
TYPED = "gradfix_bench_edit"

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


class NoPlace(Exception):
    """The file has no place for this kind of edit (no top-level function, no class)."""


def _first_line(node: ast.stmt) -> int:
    decorators = getattr(node, "decorator_list", ())
    return min([node.lineno, *(d.lineno for d in decorators)])


def _size(node: ast.stmt) -> int:
    return (node.end_lineno or node.lineno) - _first_line(node) + 1


def _inside_body(scope: ast.FunctionDef | ast.AsyncFunctionDef, lines: list[str]) -> int:
    """The 0-based line before which a statement can be typed in ``scope``'s body: before
    its middle statement (after the docstring), at that statement's indentation."""
    body = list(scope.body)
    first = body[0]
    if type(first) is ast.Expr and type(first.value) is ast.Constant and len(body) > 1:
        body = body[1:]  # the docstring stays one
    statement = body[len(body) // 2]
    line = _first_line(statement) - 1
    if lines[line][: statement.col_offset].strip():
        raise NoPlace(f"line {line + 1} holds another statement before this one")
    return line


def place(text: str, kind: str) -> tuple[int, str, str]:
    """Where ``kind``'s line goes: (0-based line to insert before, indentation, what)."""
    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    functions = (ast.FunctionDef, ast.AsyncFunctionDef)
    if kind == "function":
        candidates = [n for n in tree.body if isinstance(n, functions)]
        if not candidates:
            raise NoPlace("no top-level function")
        scope = max(candidates, key=_size)
        what = f"function {scope.name} ({_size(scope):,} lines)"
    elif kind == "method":
        classes = [n for n in tree.body if isinstance(n, ast.ClassDef)]
        methods = []
        if classes:
            owner = max(classes, key=_size)
            methods = [n for n in owner.body if isinstance(n, functions)]
        if not methods:
            raise NoPlace("no top-level class with a method")
        scope = methods[len(methods) // 2]
        what = f"method {owner.name}.{scope.name} (class of {_size(owner):,} lines)"
    else:
        middle = len(lines) // 2
        statement = next(
            (n for n in tree.body if _first_line(n) > middle),
            tree.body[-1] if tree.body else None,
        )
        if statement is None:
            raise NoPlace("an empty module")
        line = _first_line(statement) - 1
        return line, "", f"module level, before line {line + 1}"
    line = _inside_body(scope, lines)
    indent = lines[line][: len(lines[line]) - len(lines[line].lstrip())]
    return line, indent, what


def versions(text: str, kind: str, count: int) -> tuple[str, list[str]]:
    """What the edits of ``kind`` are, and the ``count`` texts sent after ``text``: the
    typed line inserted (its value the version) every other time, the original between."""
    line, indent, what = place(text, kind)
    lines = text.splitlines(keepends=True)
    texts = []
    for version in range(2, count + 2):
        if version % 2:
            texts.append(text)
            continue
        typed = f"{indent}{TYPED} = {version}\n"
        edited = "".join(lines[:line] + [typed] + lines[line:])
        ast.parse(edited)  # the edit keeps the file valid (a SyntaxError is a bench bug)
        texts.append(edited)
    previous = text
    for sent in texts:
        if sent == previous:
            raise AssertionError(f"an edit of {what} sends unchanged text")
        previous = sent
    return what, texts


def percentile(times: list[float], share: float) -> float:
    ordered = sorted(times)
    return ordered[min(len(ordered) - 1, int(len(ordered) * share))]


def spawn(cwd: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "gradfix", "lsp"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=cwd,
    )


def bench_file(
    name: str, text: str, kinds: list[str], edits: int, say: Callable[[str], None]
) -> dict[str, list[float]]:
    """Times of ``initialize``, ``open`` and each kind's edits of one file, in seconds."""
    edited: dict[str, tuple[str, list[str]] | NoPlace] = {}
    for kind in kinds:
        try:
            edited[kind] = versions(text, kind, edits)
        except NoPlace as why:
            edited[kind] = why
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / Path(name).name
        path.write_text(text, encoding="utf-8")
        uri = path.as_uri()
        start = time.perf_counter()
        process = spawn(tmp)
        client = LspClient(process)
        times: dict[str, list[float]] = {}
        try:
            client.initialize(Path(tmp))
            times["initialize"] = [time.perf_counter() - start]
            start = time.perf_counter()
            client.open(uri, text)
            found = client.diagnostics(uri)
            times["open"] = [time.perf_counter() - start]
            say(f"{name}: {text.count(chr(10)):,} lines, {len(found)} diagnostics")
            version = 1
            for kind in kinds:
                if isinstance(edited[kind], NoPlace):
                    say(f"  {kind}: skipped ({edited[kind]})")
                    continue
                what, texts = edited[kind]  # made before: no pause between edits
                last = text
                times[kind] = []
                for sent in texts:
                    version += 1
                    start = time.perf_counter()
                    client.change(uri, version, sent)
                    client.diagnostics(uri, version)
                    times[kind].append(time.perf_counter() - start)
                    last = sent
                if last != text:  # back to the original for the next kind
                    version += 1
                    client.change(uri, version, text)
                    client.diagnostics(uri, version)
                say(f"  {kind}: {what}")
            client.stop()
        finally:
            if process.poll() is None:
                process.kill()
    return times


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--file", type=Path, action="append", help="a file to edit (repeatable)")
    parser.add_argument("--pinned", type=Path, help="the directory of the pinned files")
    parser.add_argument("--lines", type=int, default=5000, help="of the generated file")
    parser.add_argument("--edits", type=int, default=20, help="per kind of edit")
    parser.add_argument(
        "--kind", action="append", choices=KINDS, help="edit kinds (default: all three)"
    )
    args = parser.parse_args()
    files: list[tuple[str, str]] = []
    for path in args.file or ():
        try:
            files.append((str(path), path.read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError) as error:
            print(f"lsp_speed: cannot read {path}: {error}", file=sys.stderr)
            return 2
    for relative, package, lines in PINNED if args.pinned else ():
        path = args.pinned / relative
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as error:
            print(f"lsp_speed: {error} (see the docstring: how to get them)", file=sys.stderr)
            return 2
        if text.count("\n") != lines:
            print(
                f"lsp_speed: {path} has {text.count(chr(10)):,} lines, not {lines:,}: "
                f"not the file of {package}",
                file=sys.stderr,
            )
            return 2
        files.append((f"{relative} ({package})", text))
    if not files:
        files.append((f"generated {args.lines:,}-line file", generated(args.lines)))
    kinds = args.kind or list(KINDS)
    for name, text in files:
        try:
            times = bench_file(name, text, kinds, args.edits, print)
        except (SyntaxError, AssertionError) as error:
            print(f"lsp_speed: {name}: {error}", file=sys.stderr)
            return 2
        print(f"  initialize {ms(times['initialize'][0])}, open {ms(times['open'][0])}")
        for kind in kinds:
            if kind in times:
                edit = times[kind]
                print(
                    f"  {kind:8} {len(edit)} edits: median {ms(statistics.median(edit))},"
                    f" p90 {ms(percentile(edit, 0.9))}, worst {ms(max(edit))}"
                    " (target: median ≤ 50 ms)"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
