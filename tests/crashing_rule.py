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
