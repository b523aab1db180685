"""Graphs kept alive across iterations: values the program holds that pin earlier steps.

After a backward call, a value the program still holds whose graph reaches the roots of
*two or more earlier* backward calls keeps every one of those steps' graphs (activations
included) alive, and grows by one graph per step: ``total_loss += loss`` or
``losses.append(loss)`` where only a number was meant to be kept (GF403). The values looked
at are the names of the user's frames on the stack and of their modules, the items of the
lists, tuples, deques and dicts they hold, and the attributes of ``self``. A graph is
walked from the value down, not past a root (below a root lies that step's forward, which
the root already stands for), and only its first nodes: an accumulation's roots sit at the
top of its graph.

The line reported is where the value is updated: the op that made the held tensor (the
``+=`` of a running total), or for a container the statement that adds to it
(``losses.append(loss)``, found in the frame's source).

Imported in the traced process only.
"""

from __future__ import annotations

import ast
import functools
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from types import FrameType
from typing import Any

import torch

from gradfix import pyast
from gradfix.trace.sites import UserFrames

#: Nodes looked at per held value (an accumulation's earlier roots are near its top).
MAX_NODES = 200
#: Items looked at per container, the latest first.
MAX_ITEMS = 64
#: Methods that add to a container.
ADDING_METHODS = frozenset({"append", "extend", "insert", "appendleft", "add", "update"})


@dataclass
class Held:
    """A name the program holds, and the tensors with a graph it reaches."""

    frame: FrameType
    name: str
    tensors: list[torch.Tensor]
    container: str | None  # "list", "dict"... when the name holds a container


def held_values(frames: UserFrames, start: FrameType | None) -> Iterator[Held]:
    """The values of the user's frames from ``start`` outwards and of their modules."""
    seen: set[int] = set()
    frame = start
    while frame is not None:
        if frames.is_user_file(frame.f_code.co_filename):
            for scope in (frame.f_locals, frame.f_globals):
                if id(scope) not in seen:
                    seen.add(id(scope))
                    yield from _scope_values(frame, scope)
        frame = frame.f_back


def _scope_values(frame: FrameType, scope: dict[str, Any]) -> Iterator[Held]:
    for name, value in list(scope.items()):
        if name.startswith("__"):
            continue
        held = _held(frame, name, value)
        if held is not None:
            yield held
        if name == "self" and not isinstance(value, torch.Tensor):
            for attribute, item in list(getattr(value, "__dict__", {}).items()):
                held = _held(frame, f"self.{attribute}", item)
                if held is not None:
                    yield held


def _held(frame: FrameType, name: str, value: Any) -> Held | None:
    if isinstance(value, torch.Tensor):
        return Held(frame, name, [value], None) if value.grad_fn is not None else None
    if isinstance(value, dict):
        items = list(value.values())[-MAX_ITEMS:]
    elif isinstance(value, (list, tuple, deque)):
        items = list(value)[-MAX_ITEMS:]
    else:
        return None
    tensors = [t for t in items if isinstance(t, torch.Tensor) and t.grad_fn is not None]
    return Held(frame, name, tensors, type(value).__name__) if tensors else None


def earlier_roots(tensors: list[torch.Tensor], key: str, current: int) -> set[int]:
    """The earlier backward calls (numbers below ``current``) whose roots the graphs of
    ``tensors`` reach; ``key`` is the node metadata entry holding a root's call number."""
    found: set[int] = set()
    queue = deque(t.grad_fn for t in tensors)
    seen: set[int] = set()
    while queue and len(seen) < MAX_NODES:
        node: Any = queue.popleft()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        root = node.metadata.get(key)
        if root is not None:
            if root < current:
                found.add(root)
            continue  # below a root lies that step's own forward
        queue.extend(next_node for next_node, _ in node.next_functions)
    return found


def update_line(frame: FrameType, name: str) -> int | None:
    """The first line of the frame's code that adds to ``name`` (``name.append(...)``,
    ``name += ...``, ``name[k] = ...``), or None."""
    code = frame.f_code
    lines = [line for _, _, line in code.co_lines() if line is not None]
    first, last = (min(lines), max(lines)) if lines else (code.co_firstlineno, code.co_firstlineno)
    for node in _statements(code.co_filename):
        if first <= node.lineno <= last and _updates(node, name):
            return node.lineno
    return None


Update = ast.Call | ast.AugAssign | ast.Assign


@functools.lru_cache(maxsize=32)
def _statements(filename: str) -> tuple[Update, ...]:
    """The nodes of a file in source order (empty when it cannot be read or parsed)."""
    try:
        with open(filename, encoding="utf-8") as source:
            tree = pyast.parse(source.read(), filename)
    except (OSError, SyntaxError, ValueError):
        return ()
    nodes: list[Update] = [
        n for n in ast.walk(tree) if isinstance(n, (ast.Call, ast.AugAssign, ast.Assign))
    ]
    return tuple(sorted(nodes, key=lambda n: (n.lineno, n.col_offset)))


def _updates(node: Update, name: str) -> bool:
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return node.func.attr in ADDING_METHODS and _dotted(node.func.value) == name
    if isinstance(node, ast.AugAssign):
        return _dotted(node.target) == name
    if isinstance(node, ast.Assign):
        return any(isinstance(t, ast.Subscript) and _dotted(t.value) == name for t in node.targets)
    return False


def _dotted(node: ast.AST) -> str | None:
    """``self.history`` for the expression ``self.history``; None for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        owner = _dotted(node.value)
        return None if owner is None else f"{owner}.{node.attr}"
    return None
