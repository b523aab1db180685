"""Pictures of findings for the HTML reports: the path from a leaf to the loss.

Each finding gets a small static SVG (no script, no network): one box per op on the path
from the leaf (or parameter) that requires grad to the backward call, each with its
source line, and the box where the graph breaks marked (the cut, the in-place change,
the first non-finite value...). When the finding has a fix, the same path in the fixed
source is drawn beside it. Every box is a ``<g class="node" data-line="12"
data-role="leaf|op|mark|fixed|root">``.

Static findings (``check``) get their path from the analysis, the same for every rule:
the def-use chain of the finding's statement back to a statement that reads no earlier
binding (the leaf), and forward through the next reads of what it binds to a
``backward`` / ``autograd.grad`` call. Runtime findings (``trace``) get theirs from the
evidence the tracer recorded: the grad_fn chain to the node of interest (``graph``) and
the lines of the ops involved (``saved_at``, ``changed_at``, ``backward_at``...).
"""

from __future__ import annotations

import ast
import difflib
import functools
import html
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gradfix import pyast

MAX_STEPS = 8  # boxes on each side of the marked one
#: what the marked box shows, by rule family (``GF2xx``: in-place...) and by run kind
MARKS = {"GF1": "cut", "GF2": "in-place", "GF3": "non-finite", "GF4": "graph"}
KIND_MARKS = {"nonfinite": "non-finite", "graph-kept": "graph", "backward-twice": "graph"}
BACKWARD = ("backward", "grad")
#: evidence sites of a run finding, in the order they sit on the path, and their labels
EVIDENCE_SITES = (
    ("produced_at", "made"),
    ("carried_from", "made earlier"),
    ("saved_at", "saved for backward"),
    ("changed_at", "changed in place"),
    ("used_at", "used"),
)


@dataclass(frozen=True)
class Step:
    """One box: the source line, the op on it and the line's text."""

    line: int
    op: str
    text: str
    role: str = "op"  # leaf | op | mark | fixed | root


def mark_label(code: str, kind: str | None = None) -> str:
    if kind is not None:
        if kind in KIND_MARKS:
            return KIND_MARKS[kind]
        if "cut" in kind:
            return "cut"
        if "inplace" in kind:
            return "in-place"
    return MARKS.get(code[:3], "finding")


# --------------------------------------------------------------------- static paths
def static_path(source: str, line: int, mark: str = "mark") -> list[Step]:
    """The path through the statement at ``line``: from the leaf its values come from to
    the backward call its results reach; that statement's box has the role ``mark``."""
    analysed = _analyse(source)
    if analysed is None:
        return []
    tree, semantic = analysed
    start = _statement_at(tree, line)
    if start is None:
        return []
    lines = source.splitlines()
    back = _back_chain(semantic, start)
    forward = _forward_chain(semantic, tree, start)
    chain = [*back, start, *forward]
    steps = [_step(semantic, s, lines, "op") for s in chain]
    if not start.lineno <= line <= (start.end_lineno or start.lineno):
        line = start.lineno  # a compound statement's header: its body's first statement
    steps[len(back)] = Step(line, steps[len(back)].op, _text(lines, line), mark)
    if back:
        steps[0] = _with_role(steps[0], "leaf")
    if forward and _is_backward(forward[-1]):
        steps[-1] = _with_role(steps[-1], "root")
    return steps


@functools.lru_cache(maxsize=4)
def _analyse(source: str) -> tuple[ast.Module, Any] | None:
    """The tree and analysis of a source (one per file, whatever its findings' count)."""
    from gradfix.semantic import Semantic

    try:
        tree = pyast.parse(source)
    except (SyntaxError, ValueError):
        return None
    return tree, Semantic(tree, source)


def _statement_at(tree: ast.Module, line: int) -> ast.stmt | None:
    """The innermost simple statement on ``line`` (the first of a compound one's body)."""
    found: ast.stmt | None = None
    body: list[ast.stmt] = tree.body
    while True:
        here = [s for s in body if s.lineno <= line <= (s.end_lineno or s.lineno)]
        if not here:
            return found
        found = here[0]
        inner = [b for b in ("body", "orelse", "finalbody") if getattr(found, b, None)]
        if not inner:
            return found
        body = [s for b in inner for s in getattr(found, b)]
        if found.lineno == line and not any(s.lineno == line for s in body):
            return body[0]


def _reads(statement: ast.stmt) -> list[ast.Name | ast.Attribute]:
    """The names and ``self.<attr>`` a statement reads (an assignment: its value)."""
    parts: list[ast.AST] = [statement]
    if isinstance(statement, (ast.Assign, ast.AnnAssign)) and statement.value is not None:
        parts = [statement.value]
    return [n for p in parts for n in ast.walk(p) if isinstance(n, (ast.Name, ast.Attribute))]


def _sources(semantic: Any, read: ast.Name | ast.Attribute, at: ast.stmt) -> list[Any]:
    """``(statement, value)`` of what ``read`` holds at ``at``: its binding (an argument:
    the call passing it), the index assignments into it since, a ``self.<attr> = ...``."""
    if isinstance(read, ast.Attribute):
        found = semantic.self_attribute_values(read, at)
        return [(semantic.enclosing_statement(b.node), value) for value, b in found]
    binding = semantic.reaching_binding(read)
    if binding is None or binding.kind in ("import", "def", "class"):
        return []
    if binding.kind == "param":
        passed = semantic.passed_arguments(binding.node)
        return [(semantic.enclosing_statement(call), value) for value, call in passed[:1]]
    statement = semantic.enclosing_statement(binding.node)
    if statement is None or statement.lineno >= at.lineno:
        return []
    return [(statement, binding.value), *semantic.index_assignments(read, at)]


def _back_chain(semantic: Any, statement: ast.stmt) -> list[ast.stmt]:
    """Earlier statements, each binding what the next one reads (the nearest that
    requires grad first), up to one that reads nothing bound before."""
    chain: list[ast.stmt] = []
    current = statement
    while len(chain) < MAX_STEPS:
        earlier = []
        for read in _reads(current):
            for found, value in _sources(semantic, read, current):
                if found is None or found is current or found in chain:
                    continue
                grad = value is not None and semantic.requires_grad(value, found)
                earlier.append((not grad, -found.lineno, found))
        if not earlier:
            break
        current = min(earlier, key=lambda e: e[:2])[2]
        chain.insert(0, current)
    return chain


def _bound(statement: ast.stmt) -> set[str]:
    """The names a statement binds or changes (``x.add_(1)``: ``x``)."""
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call):
        func = statement.value.func
        while isinstance(func, (ast.Attribute, ast.Call, ast.Subscript)):
            func = func.func if isinstance(func, ast.Call) else func.value
        return {func.id} if isinstance(func, ast.Name) else set()
    targets: list[ast.AST] = []
    if isinstance(statement, ast.Assign):
        targets = list(statement.targets)
    elif isinstance(statement, (ast.AugAssign, ast.AnnAssign, ast.For, ast.With)):
        targets = [getattr(statement, "target", None) or statement]
    names = set()
    for target in targets:
        for node in ast.walk(target):
            if isinstance(node, ast.Name):
                names.add(node.id)
    return names


def _forward_chain(semantic: Any, tree: ast.Module, statement: ast.stmt) -> list[ast.stmt]:
    """Later statements, each reading what the one before binds (a ``return``: the call of
    its function), up to a backward call."""
    simple = sorted(
        (s for s in ast.walk(tree) if isinstance(s, ast.stmt) and not hasattr(s, "body")),
        key=lambda s: (s.lineno, s.col_offset),
    )
    chain: list[ast.stmt] = []
    current = statement
    while len(chain) < MAX_STEPS and not _is_backward(current):
        if isinstance(current, ast.Return):
            func = semantic.enclosing_function(current)
            sites = semantic.call_sites(func) if func is not None else []
            following = semantic.enclosing_statement(sites[0]) if sites else None
            if following is None or following in chain:
                break
            chain.append(following)
            current = following
            continue
        names = _bound(current)
        after = [s for s in simple if s.lineno > (current.end_lineno or current.lineno)]
        following = next(
            (s for s in after if _carries(s) and names & {_spelled(n) for n in _reads(s)}),
            None,
        )
        if following is None or following in chain:
            break
        chain.append(following)
        current = following
    return chain


def _carries(statement: ast.stmt) -> bool:
    """Whether a statement can pass a value on: not a bare call of a function
    (``print(loss)``, ``log(x)``), but an assignment, a return, ``x.add_(1)``..."""
    value = statement.value if isinstance(statement, ast.Expr) else None
    return not isinstance(value, ast.Call) or isinstance(value.func, ast.Attribute)


def _spelled(read: ast.Name | ast.Attribute) -> str:
    return read.id if isinstance(read, ast.Name) else read.attr


def _is_backward(statement: ast.stmt) -> bool:
    return any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in BACKWARD
        for n in ast.walk(statement)
    )


def _step(semantic: Any, statement: ast.stmt, lines: list[str], role: str) -> Step:
    calls = [n for n in ast.walk(statement) if isinstance(n, ast.Call)]
    op = ""
    if calls:
        call = calls[0]
        name = semantic.call_name(call) if hasattr(semantic, "call_name") else None
        if name is None and isinstance(call.func, ast.Attribute):
            name = f".{call.func.attr}()"
        op = name or ast.unparse(call.func)
    elif isinstance(statement, ast.AugAssign):
        op = f"{type(statement.op).__name__.lower()} (in place)"
    elif isinstance(statement, ast.Return):
        op = "return"
    elif isinstance(statement, ast.Assign) and isinstance(statement.value, ast.BinOp):
        op = type(statement.value.op).__name__.lower()
    elif isinstance(statement, ast.Assign) and isinstance(statement.value, ast.Subscript):
        op = "index"
    if isinstance(statement, ast.Assign) and isinstance(statement.targets[0], ast.Subscript):
        op = f"index assign ({op})" if op else "index assign"
    return Step(statement.lineno, op, _text(lines, statement.lineno), role)


def _text(lines: list[str], line: int) -> str:
    """The line without indentation and its trailing comment (a ``#`` outside quotes)."""
    text = lines[line - 1].strip() if 0 < line <= len(lines) else ""
    code, hash_, _ = text.partition("#")
    if hash_ and code.count("'") % 2 == 0 and code.count('"') % 2 == 0:
        return code.rstrip()
    return text


def _with_role(step: Step, role: str) -> Step:
    return step if step.role == "mark" else Step(step.line, step.op, step.text, role)


def fixed_path(original: str, fixed: str, line: int) -> list[Step]:
    """The path through the fixed source at the statement ``line`` became; the lines the
    fix wrote have the role ``fixed``."""
    old, new = original.splitlines(), fixed.splitlines()
    changed: set[int] = set()
    target = line
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old, new, False).get_opcodes():
        if tag != "equal":
            changed.update(range(j1 + 1, j2 + 1))
        if i1 < line <= i2 or (tag == "insert" and i1 == line - 1):
            target = j1 + 1 + (min(line - 1 - i1, j2 - j1 - 1) if tag == "equal" else 0)
    steps = static_path(fixed, target, "fixed")
    shown = {s.line for s in steps}
    drawn = []
    for step in steps:
        if step.line not in changed:
            drawn.append(_unmark(step))
            continue
        # a line the fix wrote just before it and no box shows: the block it opened
        header = step.line - 1
        opened = header in changed and header not in shown
        op = f"{step.op} under `{_text(new, header)}`" if opened else step.op
        drawn.append(Step(step.line, op, step.text, "fixed"))
    return drawn


def _unmark(step: Step) -> Step:
    return Step(step.line, step.op, step.text, "op") if step.role == "fixed" else step


# -------------------------------------------------------------------- runtime paths
def runtime_path(path: str, line: int, evidence: dict[str, Any], source: str) -> list[Step]:
    """The path of a run's finding at ``path:line``: the grad_fn chain the tracer
    recorded, the lines of its evidence, the finding's line (marked), the backward."""
    lines = source.splitlines()
    steps: list[Step] = []

    def add(at: Any, op: str, role: str = "op") -> None:
        if not isinstance(at, dict) or not at.get("line") or not at.get("path"):
            return
        if os.path.abspath(str(at["path"])) != os.path.abspath(path):
            return  # another file's line (torch's or a module's): not in this drawing
        number = int(at["line"])
        same = [i for i, s in enumerate(steps) if s.line == number]
        if same:  # one line, several ops: one box
            old = steps[same[0]]
            ops = old.op if not op or op in old.op.split(", ") else f"{old.op}, {op}"
            keep = old.role if old.role in ("mark", "root") else role
            steps[same[0]] = Step(number, ops, old.text, keep)
        elif role == "mark" and steps and steps[-1].role == "root":
            steps.insert(-1, Step(number, op, _text(lines, number), role))
        else:
            steps.append(Step(number, op, _text(lines, number), role))

    for node in evidence.get("graph") or []:
        add(node, str(node.get("op", "")), "leaf" if node.get("op") == "leaf" else "op")
    for key, label in EVIDENCE_SITES:
        op = evidence.get(key.replace("_at", "_by")) or label
        add(evidence.get(key), str(op))
    changed, cut = evidence.get("changed_by"), evidence.get("cut")
    mark = f"{changed} (in place)" if changed else f"{cut} (cut)" if cut else ""
    add({"path": path, "line": line}, mark, "mark")
    add(evidence.get("backward_at"), "backward", "root")
    return steps[-2 * MAX_STEPS :]


# ---------------------------------------------------------------------------- SVG
COLORS = {  # fill, stroke
    "leaf": ("#e8f1fb", "#3a6ea5"),
    "op": ("#f6f8fa", "#8c959f"),
    "mark": ("#fde8e8", "#c62828"),
    "fixed": ("#e6f4ea", "#2e7d32"),
    "root": ("#fff4e0", "#b26a00"),
}
BOX_W, BOX_H, GAP, PAD = 420, 44, 18, 10


def svg(steps: Sequence[Step], title: str, mark: str) -> str:
    """One path as a column of boxes joined by arrows (the gradient flows upwards)."""
    e = html.escape
    height = PAD * 2 + 20 + len(steps) * (BOX_H + GAP)
    width = BOX_W + 2 * PAD + 110
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="path" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" role="img" aria-label="{e(title)}">',
        f'<text x="{PAD}" y="{PAD + 12}" font-size="13" font-weight="bold">{e(title)}</text>',
    ]
    for index, step in enumerate(steps):
        y = PAD + 20 + index * (BOX_H + GAP)
        fill, stroke = COLORS[step.role]
        note = {"mark": mark, "fixed": "fix", "leaf": "leaf", "root": "loss"}.get(step.role)
        width_line = 3 if step.role in ("mark", "fixed") else 1
        text = step.text if len(step.text) <= 52 else step.text[:51] + "…"
        parts += [
            f'<g class="node" data-line="{step.line}" data-role="{step.role}">',
            f'<rect x="{PAD}" y="{y}" width="{BOX_W}" height="{BOX_H}" rx="6" fill="{fill}" '
            f'stroke="{stroke}" stroke-width="{width_line}"/>',
            f'<text x="{PAD + 8}" y="{y + 17}" font-size="12" font-family="sans-serif">'
            f'<tspan font-weight="bold">line {step.line}</tspan>  {e(step.op)}</text>',
            f'<text x="{PAD + 8}" y="{y + 35}" font-size="12" font-family="monospace">'
            f"{e(text)}</text>",
        ]
        if note:
            parts.append(
                f'<text x="{PAD + BOX_W + 8}" y="{y + 27}" font-size="13" font-weight="bold" '
                f'fill="{stroke}">{e(note)}</text>'
            )
        parts.append("</g>")
        if index:
            top, x = y - GAP, PAD + BOX_W // 2
            parts.append(
                f'<path d="M{x} {top + 2}V{y - 2}M{x - 4} {y - 7}L{x} {y - 2}L{x + 4} {y - 7}" '
                'stroke="#57606a" fill="none"/>'
            )
    parts.append("</svg>")
    return "".join(parts)


def figure(before: Sequence[Step], after: Sequence[Step], mark: str) -> str:
    """The finding's drawing(s) as HTML: before, and after the fix when there is one."""
    if not before:
        return ""
    drawings = [svg(before, "before", mark)]
    if after:
        drawings.append(svg(after, "after the fix", mark))
    return f'<figure class="paths">{"".join(drawings)}</figure>'


STYLE = "figure.paths{display:flex;gap:16px;flex-wrap:wrap;margin:6px 0 14px}"
