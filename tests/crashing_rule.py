"""A rule with a bug, importable by name so that worker processes can load it
(tests/test_rule_crash.py)."""

from __future__ import annotations

import ast
import os

from gradfix.rule import FixSafety, Rule


class Crashes(Rule):
    """## What it does\nRaises on every file that mentions `crash` (a bug in a rule)."""

    code = "GF903"
    name = "crashes"
    message = "never reported"
    fix_safety = FixSafety.SAFE

    def visit_Call(self, node: ast.Call) -> None:
        if "crash" not in self.context.source:
            return
        # the process id tells the tests which process ran the rule
        raise RecursionError(f"maximum recursion depth exceeded in process {os.getpid()}")


class KillsWorker(Rule):
    """## What it does\nEnds its process on a file that mentions `kill-the-worker` (native
    code that crashes), and sleeps on one that mentions `slow-file` (a long lint)."""

    code = "GF904"
    name = "kills-worker"
    message = "never reported"
    fix_safety = FixSafety.SAFE

    def visit_Call(self, node: ast.Call) -> None:
        if "kill-the-worker" in self.context.source:
            os._exit(3)
        if "slow-file" in self.context.source:
            import time

            time.sleep(0.2)
