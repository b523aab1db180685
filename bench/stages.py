"""Where a cold check spends its time, stage by stage, on one core (CPU seconds).

    python bench/stages.py                      # the transformers package of the corpus
    python bench/stages.py --sample 300 DIR...  # a seeded sample of the files under DIR

Prints, for the files that can import torch (the others are only syntax-checked), the
stages of gradfix's pipeline: reading, Python's ``ast.parse``, the shared analysis
(:class:`gradfix.semantic.Semantic`), the rules that decide on ``ast`` (one batched walk,
and each rule alone), and LibCST's parse with the building of the planned fixes — paid only
by the files where some rule planned a fix (their number is printed). For comparison, it
also times ``libcst.parse_module`` on every file (what every file cost before issue 12).
The corpus comes from ``bench/corpus.py`` (``pip download``, cached outside the repository).
"""

from __future__ import annotations

import argparse
import ast
import gc
import sys
import time
from pathlib import Path

from gradfix.edits import Editor
from gradfix.engine import may_import_torch, parse
from gradfix.registry import all_rules
from gradfix.rule import FixPlan, Rule, RuleContext, rules_for_source
from gradfix.semantic import Semantic
from gradfix.walk import walk_ast_batched, walked_types

sys.path.insert(0, str(Path(__file__).parent))
import corpus  # noqa: E402

STAGES = ["read", "ast.parse", "semantic", "rules", "libcst + fixes (files with a plan)"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", type=Path)
    parser.add_argument("--sample", type=int, default=0, help="files to sample (0: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--no-libcst-baseline", action="store_true", help="skip timing LibCST on every file"
    )
    args = parser.parse_args()
    files = corpus.sampled_files(args.paths, args.sample, args.seed)
    rules = [rule for rule in all_rules() if rule.default_enabled]
    ast_rules = [rule for rule in rules if issubclass(rule, Rule)]
    if len(ast_rules) < len(rules):
        names = ", ".join(r.code for r in rules if r not in ast_rules)
        print(f"not measured (rules still on LibCST): {names}", file=sys.stderr)
    clock = time.process_time
    cost = dict.fromkeys(STAGES, 0.0)
    alone = {rule.code: 0.0 for rule in ast_rules}
    libcst_everywhere = 0.0
    lines = torch_lines = planned_files = 0
    gc.disable()  # the engine lints each file without the cyclic GC (cyclic_gc_paused)
    for path in files:
        start = clock()
        text = path.read_text(encoding="utf-8", errors="replace")
        cost["read"] += clock() - start
        count = text.count("\n")
        lines += count
        if not may_import_torch(text):
            continue
        torch_lines += count
        try:
            start = clock()
            tree = ast.parse(text)
            cost["ast.parse"] += clock() - start
        except (SyntaxError, ValueError):
            continue
        running = rules_for_source(ast_rules, text)
        start = clock()
        semantic = Semantic(tree, text, walked=walked_types(tuple(running)))
        cost["semantic"] += clock() - start
        context = RuleContext(str(path), text, semantic)
        if not semantic.imports_torch():
            continue
        try:
            start = clock()
            visitors = [rule(context) for rule in running]
            walk_ast_batched(tree, visitors, **_walked(semantic))
            cost["rules"] += clock() - start
            for rule in running:
                start = clock()
                walk_ast_batched(tree, [rule(context)], **_walked(semantic))
                alone[rule.code] += clock() - start
        except Exception as error:  # a bug in a rule: say which file, go on
            print(f"{path}: {type(error).__name__}: {error}", file=sys.stderr)
            continue
        plans = [r.fix for v in visitors for r in v.reports if isinstance(r.fix, FixPlan)]
        if plans:
            planned_files += 1
            start = clock()
            editor = Editor(parse(text), text, semantic.torch_alias())
            for plan in plans:
                editor.realise(plan)
            cost["libcst + fixes (files with a plan)"] += clock() - start
        if not args.no_libcst_baseline:
            start = clock()
            parse(text)
            libcst_everywhere += clock() - start
    print(f"{len(files)} files, {lines:,} lines; {torch_lines:,} lines can import torch")
    print(f"files with a planned fix (parsed by LibCST): {planned_files}\n")
    print("| stage (one core) | CPU s | per 100k lines |\n|---|---:|---:|")
    for stage, seconds in [*cost.items(), ("total", sum(cost.values()))]:
        print(f"| {stage} | {seconds:.2f} | {seconds / max(torch_lines, 1) * 1e5:.2f} |")
    if not args.no_libcst_baseline:
        print(
            f"| (before issue 12: `libcst.parse_module` of every file) | {libcst_everywhere:.2f} "
            f"| {libcst_everywhere / max(torch_lines, 1) * 1e5:.2f} |"
        )
    print("\n| rule alone (walk included) | CPU s |\n|---|---:|")
    for code, seconds in sorted(alone.items(), key=lambda item: -item[1]):
        print(f"| {code} | {seconds:.2f} |")


def _walked(semantic: Semantic) -> dict[str, object]:
    """What the engine hands the walk: the analysis's pre-order, nodes by type and the
    nodes of the rules' types listed in pre-order."""
    return {
        "order": semantic.order,
        "last": semantic.last,
        "by_type": semantic.by_type,
        "call_aliases": semantic.call_aliases(),
        "walked": (semantic.walked_types, semantic.walked_nodes),
    }


if __name__ == "__main__":
    main()
