"""``python -m gradfix.trace.entry MODULE:FUNCTION``: what ``gradfix trace --entry`` runs.

Imports ``MODULE`` from the current directory and calls ``FUNCTION()``; an integer it
returns is the exit status (as a console-script entry point's would be).
"""

from __future__ import annotations

import importlib
import os
import sys

from gradfix.verify.harness import parse_entry


def main(argv: list[str]) -> int:
    module_name, function_name = parse_entry(argv[0])
    sys.path.insert(0, os.getcwd())
    sys.argv = [argv[0], *argv[1:]]
    function = getattr(importlib.import_module(module_name), function_name)
    result = function()
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
