"""Instructions a cold check executes, stage by stage: a figure that does not drift.

    python bench/instructions.py                         # 200 transformers files, seed 9
    python bench/instructions.py --sample 300 --seed 1 DIR...
    python bench/instructions.py --python OTHER/.venv/bin/python   # another checkout

On a shared or throttled machine wall and CPU seconds move by more than a change to the
rules (the same ``ast.parse`` measured 6.2 and 9.9 CPU s an hour apart). Valgrind's
callgrind counts the instructions executed (``Ir``), the same on a slow or a fast minute:
this script runs three children under it on one seeded sample — the interpreter with the
imports only, then reading, ``ast.parse`` and the analysis
(:class:`gradfix.semantic.Semantic`), then the same plus the default rules' walk — and
prints the differences. Compare two checkouts by passing the other's interpreter
(``--python``; a worktree with ``python -m venv --system-site-packages .venv &&
.venv/bin/pip install -e . --no-deps``). Needs ``valgrind``; takes a few minutes.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import NoReturn

sys.path.insert(0, str(Path(__file__).parent))
import corpus  # noqa: E402

STAGES = ("start", "analysis", "rules")


def fail(message: str) -> NoReturn:
    """One line on stderr and exit 2."""
    print(f"instructions.py: {message}", file=sys.stderr)
    sys.exit(2)


def child(stage: str, files: list[Path]) -> None:
    """What one child runs: imports, then (per ``stage``) parse, analysis and rules."""
    import ast
    import gc
    import inspect

    from gradfix.engine import may_import_torch
    from gradfix.registry import all_rules
    from gradfix.rule import Rule, RuleContext
    from gradfix.semantic import Semantic
    from gradfix.walk import walk_ast_batched

    rules = [r for r in all_rules() if r.default_enabled and issubclass(r, Rule)]
    filters_calls = "call_aliases" in inspect.signature(walk_ast_batched).parameters
    lists_walked = "walked" in inspect.signature(walk_ast_batched).parameters
    import gradfix.rule
    import gradfix.walk

    # as the engine picks the rules a file may concern (older checkouts: every rule)
    rules_for = getattr(gradfix.rule, "rules_for_source", lambda rules, text: rules)
    if stage == "start":
        return
    gc.disable()  # as the engine lints (cyclic_gc_paused)
    for path in files:
        text = path.read_text(encoding="utf-8", errors="replace")
        if not may_import_torch(text):
            continue
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError):
            continue
        running = rules_for(rules, text)
        # as the engine: the analysis lists the nodes the rules visit (older checkouts: no list)
        listed = {"walked": gradfix.walk.walked_types(tuple(running))} if lists_walked else {}
        semantic = Semantic(tree, text, **listed)
        if stage != "rules" or not semantic.imports_torch():
            continue
        context = RuleContext(str(path), text, semantic)
        walked = {"order": semantic.order, "last": semantic.last, "by_type": semantic.by_type}
        if filters_calls:  # as the engine walks (older checkouts: no call filter)
            walked["call_aliases"] = semantic.call_aliases()
        if lists_walked:
            walked["walked"] = (semantic.walked_types, semantic.walked_nodes)
        walk_ast_batched(tree, [rule(context) for rule in running], **walked)


def instructions(python: str, stage: str, listing: Path) -> int:
    """The instructions one child executes under callgrind."""
    command = [
        "valgrind",
        "--tool=callgrind",
        "--callgrind-out-file=/dev/null",
        python,
        str(Path(__file__).resolve()),
        "--child",
        stage,
        "--files",
        str(listing),
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    found = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode != 0 or found is None:
        said = [line for line in done.stderr.splitlines() if line and not line.startswith("==")]
        fail(f"the {stage} child failed: {(said or ['no output'])[-1]}")
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", type=Path)
    parser.add_argument("--sample", type=int, default=200, help="files to sample (0: all)")
    parser.add_argument("--seed", type=int, default=9)
    parser.add_argument("--python", default=sys.executable, help="the interpreter to measure")
    parser.add_argument("--child", choices=STAGES, help=argparse.SUPPRESS)
    parser.add_argument("--files", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, [Path(line) for line in args.files.read_text().splitlines()])
        return
    if shutil.which("valgrind") is None:
        fail("valgrind is not installed (apt install valgrind)")
    files = corpus.sampled_files(args.paths, args.sample, args.seed)
    listing = Path(corpus.cache_dir()) / f"instructions-{args.seed}-{len(files)}.txt"
    listing.parent.mkdir(parents=True, exist_ok=True)
    listing.write_text("\n".join(str(p) for p in files) + "\n")
    counts = {stage: instructions(args.python, stage, listing) for stage in STAGES}
    analysis = counts["analysis"] - counts["start"]
    rules = counts["rules"] - counts["analysis"]
    print(f"{len(files)} files (seed {args.seed}), {args.python}\n")
    print("| stage | instructions (M) |\n|---|---:|")
    print(f"| interpreter start-up and imports | {counts['start'] / 1e6:,.0f} |")
    print(f"| read, `ast.parse`, analysis | {analysis / 1e6:,.0f} |")
    print(f"| rules (one walk, every default rule) | {rules / 1e6:,.0f} |")
    print(f"| per-file total | {(analysis + rules) / 1e6:,.0f} |")


if __name__ == "__main__":
    main()
