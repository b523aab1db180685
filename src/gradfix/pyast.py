"""``ast.parse`` safe to call from several threads of one process.

CPython 3.11 keeps the recursion counter of the AST constructor in the ``_ast`` module's
state, shared by every thread: a parse that another thread interrupts (a finalizer that
runs Python code lets the other thread in) can end with ``SystemError: AST constructor
recursion depth mismatch`` although the source is fine. gradfix parses from worker
threads (the language server's debounced lint, verification pools), so every parse of
its own goes through one lock, and a mismatch caused by code outside gradfix is retried.
"""

from __future__ import annotations

import ast
import threading
from typing import Any

_LOCK = threading.RLock()
_MISMATCH = "AST constructor recursion depth mismatch"


def parse(
    source: str | bytes, filename: str = "<unknown>", mode: str = "exec", **kwargs: Any
) -> Any:
    """``ast.parse(source, filename, mode, **kwargs)``, one thread at a time."""
    with _LOCK:
        try:
            return ast.parse(source, filename, mode, **kwargs)
        except SystemError as exc:
            if _MISMATCH not in str(exc):
                raise
            return ast.parse(source, filename, mode, **kwargs)
