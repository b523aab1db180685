"""Where a cold check spends its time, stage by stage, on one core (CPU seconds).

    python bench/stages.py                      # the transformers package of the corpus
    python bench/stages.py --sample 300 DIR...  # a seeded sample of the files under DIR

Prints, for the files that can import torch (the others are only syntax-checked):
reading, Python's ``ast.parse``, ``libcst.parse_module`` as gradfix calls it (no per-node
validation), the shared analysis, and the rules (one batched walk, and each rule alone).
Then the share of lines in files that hold a *syntactic* trigger of the in-place rules
(GF204 inplace-on-saved, GF206 view-alias-mutation: any in-place change of a local
name): a file-level gate cannot skip a file that has one, so it bounds what gating can
save. The corpus comes from ``bench/corpus.py`` (``pip download``, cached outside the
repository).
"""

from __future__ import annotations

import argparse
import ast
import random
import sys
import time
from pathlib import Path

from gradfix.analysis import FileAnalysis
from gradfix.engine import may_import_torch, parse
from gradfix.registry import all_rules
from gradfix.rule import RuleContext
from gradfix.walk import walk_batched

sys.path.insert(0, str(Path(__file__).parent))
import corpus  # noqa: E402


def mutates_a_local_name(tree: ast.AST) -> bool:
    """An in-place change of a local name: ``x += y``, ``x[i] = y``, ``x.add_(y)``."""

    def base(node: ast.AST) -> bool:
        while isinstance(node, ast.Subscript):
            node = node.value
        return isinstance(node, ast.Name)

    for node in ast.walk(tree):
        if isinstance(node, ast.AugAssign) and base(node.target):
            return True
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Subscript) and base(t) for t in node.targets
        ):
            return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            name = node.func.attr
            if name.endswith("_") and not name.endswith("__") and base(node.func.value):
                return True
    return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", type=Path)
    parser.add_argument("--sample", type=int, default=0, help="files to sample (0: all)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if not args.paths:
        unpacked = corpus.fetch(["transformers==5.23.0"], corpus.cache_dir())[0]
        args.paths = [unpacked / "transformers"]
    roots = args.paths
    files = sorted(p for root in roots for p in root.rglob("*.py"))
    if args.sample:
        files = sorted(random.Random(args.seed).sample(files, min(args.sample, len(files))))
    rules = [rule for rule in all_rules() if rule.default_enabled]
    clock = time.process_time
    cost = dict.fromkeys(["read", "ast.parse", "libcst parse", "analysis", "rules"], 0.0)
    alone = {rule.code: 0.0 for rule in rules}
    lines = torch_lines = mutating_lines = 0
    for path in files:
        start = clock()
        text = path.read_text(encoding="utf-8", errors="replace")
        cost["read"] += clock() - start
        count = text.count("\n")
        lines += count
        if not may_import_torch(text):
            continue
        torch_lines += count
        start = clock()
        tree = ast.parse(text)
        cost["ast.parse"] += clock() - start
        mutating_lines += count if mutates_a_local_name(tree) else 0
        start = clock()
        module = parse(text)
        cost["libcst parse"] += clock() - start
        start = clock()
        analysis = FileAnalysis(module)
        cost["analysis"] += clock() - start
        context = RuleContext(str(path), text, analysis)
        try:
            start = clock()
            walk_batched(module, [rule(context) for rule in rules])
            batched = clock() - start
            for rule in rules:
                start = clock()
                walk_batched(module, [rule(context)])
                alone[rule.code] += clock() - start
        except Exception as error:  # a bug in a rule: say which file, go on
            print(f"{path}: {type(error).__name__}: {error}", file=sys.stderr)
            continue
        cost["rules"] += batched
    print(f"{len(files)} files, {lines:,} lines; {torch_lines:,} lines can import torch\n")
    print("| stage (one core) | CPU s | per 100k lines |\n|---|---:|---:|")
    for stage, seconds in cost.items():
        print(f"| {stage} | {seconds:.2f} | {seconds / max(torch_lines, 1) * 1e5:.2f} |")
    print("\n| rule alone (walk included) | CPU s |\n|---|---:|")
    for code, seconds in sorted(alone.items(), key=lambda item: -item[1]):
        print(f"| {code} | {seconds:.2f} |")
    share = mutating_lines / max(lines, 1) * 100
    print(
        f"\nlines in files with an in-place change of a local name (GF204/GF206 trigger): "
        f"{share:.1f}% of all lines, {mutating_lines / max(torch_lines, 1) * 100:.1f}% of "
        "the lines that can import torch"
    )


if __name__ == "__main__":
    main()
