"""CPU time of the shared analysis: LibCST + ``FileAnalysis`` against `ast` + ``Semantic``.

    python bench/semantic_speed.py                      # the first 50 files of torch/nn
    python bench/semantic_speed.py --paths DIR_OR_FILE ... --limit 200

For every file: parse, build the analysis, then ask each ``Name`` and ``Call`` of the tree
``is_tensor``, ``requires_grad`` and ``in_no_grad`` (what the rules ask most). Prints a
markdown table of process CPU seconds per stage (``time.process_time``; one process, no
parallelism), summed over the files. Not a test: figures go in the issue or docs.
"""

from __future__ import annotations

import argparse
import ast
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import libcst as cst

from gradfix.analysis import FileAnalysis
from gradfix.semantic import Semantic


def torch_modules() -> Path:
    import torch

    return Path(torch.__file__).parent / "nn"


def python_files(paths: Iterable[Path], limit: int) -> list[Path]:
    found: list[Path] = []
    for path in paths:
        found += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return found[:limit]


def timed(action: Callable[[], object]) -> tuple[float, object]:
    start = time.process_time()
    result = action()
    return time.process_time() - start, result


def ask_libcst(analysis: FileAnalysis, module: cst.Module) -> None:
    class Asker(cst.CSTVisitor):
        def on_visit(self, node: cst.CSTNode) -> bool:
            if type(node) is cst.Name or type(node) is cst.Call:
                analysis.is_tensor(node)  # type: ignore[arg-type]
                analysis.requires_grad(node)  # type: ignore[arg-type]
                analysis.in_no_grad(node)
            return True

    module.visit(Asker())


def ask_ast(semantic: Semantic, tree: ast.Module) -> None:
    for node in ast.walk(tree):
        if type(node) is ast.Name or type(node) is ast.Call:
            semantic.is_tensor(node)
            semantic.requires_grad(node)
            semantic.in_no_grad(node)


def measure(files: list[Path]) -> dict[str, float]:
    totals = dict.fromkeys(
        ("libcst parse", "FileAnalysis", "libcst queries", "ast parse", "Semantic", "ast queries"),
        0.0,
    )
    for path in files:
        source = path.read_text(encoding="utf-8")
        seconds, module = timed(lambda: cst.parse_module(source))  # noqa: B023
        totals["libcst parse"] += seconds
        seconds, analysis = timed(lambda: FileAnalysis(module))  # noqa: B023
        totals["FileAnalysis"] += seconds
        totals["libcst queries"] += timed(lambda: ask_libcst(analysis, module))[0]  # noqa: B023
        seconds, tree = timed(lambda: ast.parse(source))  # noqa: B023
        totals["ast parse"] += seconds
        seconds, semantic = timed(lambda: Semantic(tree, source))  # noqa: B023
        totals["Semantic"] += seconds
        totals["ast queries"] += timed(lambda: ask_ast(semantic, tree))[0]  # noqa: B023
    return totals


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--paths", nargs="*", type=Path, default=None)
    parser.add_argument("--limit", type=int, default=50)
    args = parser.parse_args()
    files = python_files(args.paths or [torch_modules()], args.limit)
    lines = sum(len(p.read_text(encoding="utf-8").splitlines()) for p in files)
    totals = measure(files)
    old = totals["libcst parse"] + totals["FileAnalysis"]
    new = totals["ast parse"] + totals["Semantic"]
    print(f"{len(files)} files, {lines} lines\n")
    print("| stage | CPU s |\n|---|---:|")
    for stage, seconds in totals.items():
        print(f"| {stage} | {seconds:.2f} |")
    print(f"| **LibCST + FileAnalysis** | {old:.2f} |")
    print(f"| **ast + Semantic** | {new:.2f} ({old / new:.1f}x faster) |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
