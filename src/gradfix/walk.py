"""A fast read-only traversal of LibCST trees, in LibCST's own visiting order.

``node.visit(visitor)`` rebuilds every node of the tree as it goes (LibCST's visit is
shared with transformers), which costs several times the parse itself. A visitor that only
reads the tree does not need that: :func:`walk` and :func:`walk_batched` call the same
``visit_<Type>`` / ``leave_<Type>`` (or ``on_visit`` / ``on_leave``) methods on the same
node objects, in the same order, without building anything.

Whitespace, comments, punctuation and operator tokens (:data:`TRIVIA`) are not visited: no
gradfix visitor looks at them as nodes (a rule reads ``node.operator`` as an attribute).

    walk(module, collector)              # like module.visit(collector)
    walk_batched(module, rule_visitors)  # like MetadataWrapper.visit_batched(...)
"""

from __future__ import annotations

import ast
import functools
import inspect
import textwrap
from collections.abc import Callable, Mapping, Sequence

import libcst as cst
from libcst._typed_visitor import CSTTypedVisitorFunctions

Handler = Callable[[cst.CSTNode], object]

#: Node types that are never visited: layout and tokens, not code.
TRIVIA: tuple[type[cst.CSTNode], ...] = (
    cst.BaseParenthesizableWhitespace,
    cst.TrailingWhitespace,
    cst.EmptyLine,
    cst.Newline,
    cst.Comment,
    cst.Comma,
    cst.Dot,
    cst.Colon,
    cst.Semicolon,
    cst.AssignEqual,
    cst.LeftParen,
    cst.RightParen,
    cst.LeftSquareBracket,
    cst.RightSquareBracket,
    cst.LeftCurlyBrace,
    cst.RightCurlyBrace,
    cst.BaseBinaryOp,
    cst.BaseUnaryOp,
    cst.BaseBooleanOp,
    cst.BaseCompOp,
    cst.BaseAugOp,
    cst.ImportStar,
    cst.Asynchronous,
)


@functools.cache
def child_fields(node_type: type[cst.CSTNode]) -> tuple[str, ...]:
    """The fields of ``node_type`` that may hold code nodes, in LibCST's visiting order.

    The order is read from the keyword order of the node's ``_visit_and_replace_children``
    (LibCST visits the fields in that order); fields that only ever hold trivia are left out.
    """
    source = textwrap.dedent(inspect.getsource(node_type._visit_and_replace_children))
    fields: list[str] = []
    for call in ast.walk(ast.parse(source)):
        if isinstance(call, ast.Call) and _called(call) == node_type.__name__:
            fields.extend(
                keyword.arg
                for keyword in call.keywords
                if keyword.arg is not None
                and not _trivia_field(keyword.arg)
                and any(_called(inner).startswith("visit_") for inner in ast.walk(keyword.value))
            )
            break
    return tuple(fields)


_TRIVIA_FIELDS = frozenset(
    {
        "lpar",
        "rpar",
        "leading_lines",
        "lines_after_decorators",
        "header",
        "footer",
        "semicolon",
        "comma",
        "equal",
        "colon",
        "dot",
        "lbracket",
        "rbracket",
        "lbrace",
        "rbrace",
        "operator",
        "asynchronous",
        "trailing_whitespace",
        "newline",
    }
)


def _called(node: ast.AST) -> str:
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        return node.func.id
    return ""


def _trivia_field(name: str) -> bool:
    return name in _TRIVIA_FIELDS or name.startswith("whitespace")


def _concrete(base: type) -> set[type]:
    found = {base}
    sub: type
    for sub in base.__subclasses__():
        found |= _concrete(sub)
    return found


#: Every node type that is visited (exact types: ``isinstance`` on LibCST's abstract
#: classes is slow, and the walk asks it for every child).
CODE_TYPES: frozenset[type] = frozenset(
    _concrete(cst.CSTNode) - set().union(*(_concrete(t) for t in TRIVIA))
)


def children(node: cst.CSTNode) -> list[cst.CSTNode]:
    """The code children of ``node`` in source order (no whitespace or tokens)."""
    found: list[cst.CSTNode] = []
    for name in child_fields(type(node)):
        value = getattr(node, name)
        if type(value) in CODE_TYPES:
            found.append(value)
        elif type(value) is tuple or type(value) is list:
            found.extend(item for item in value if type(item) in CODE_TYPES)
    return found


def walk(node: cst.CSTNode, visitor: cst.CSTVisitor) -> None:
    """Visit ``node``'s tree like ``node.visit(visitor)``; ``visit_X`` returning False
    skips the children, as in LibCST."""
    on_visit, on_leave = visitor.on_visit, visitor.on_leave

    def visit(current: cst.CSTNode) -> None:
        if on_visit(current):
            for child in children(current):
                visit(child)
        on_leave(current)  # type: ignore[call-arg]

    if type(node) in CODE_TYPES:
        visit(node)


def walk_batched(
    node: cst.CSTNode,
    visitors: Sequence[cst.CSTVisitor],
    on_error: Callable[[cst.CSTVisitor, Exception], None] | None = None,
) -> None:
    """Visit once for all ``visitors`` (LibCST's batched visit: no visitor can skip
    children). With ``on_error``, a visitor that raises is handed to it with the
    exception and visits nothing more, while the others go on: a bug in one rule does
    not hide the findings of the others."""
    live = list(visitors)
    visits: dict[type, list[Handler]] = {}
    leaves: dict[type, list[Handler]] = {}

    def drop(handler: Handler, error: Exception) -> None:
        if on_error is None:
            raise error
        visitor = handler.__self__  # type: ignore[attr-defined]  # a bound visit_/leave_
        on_error(visitor, error)
        live.remove(visitor)
        visits.clear()  # rebuilt without it
        leaves.clear()

    def handle(table: dict[type, list[Handler]], prefix: str, current: cst.CSTNode) -> None:
        kind = type(current)
        handlers = table.get(kind)
        if handlers is None:
            handlers = table[kind] = _handlers(live, prefix + kind.__name__)
        for handler in handlers:
            try:
                handler(current)
            except Exception as error:
                drop(handler, error)

    def visit(current: cst.CSTNode) -> None:
        handle(visits, "visit_", current)
        for child in children(current):
            visit(child)
        handle(leaves, "leave_", current)

    if type(node) in CODE_TYPES:
        visit(node)


def _handlers(visitors: Sequence[cst.CSTVisitor], name: str) -> list[Handler]:
    """The visitors' own ``name`` methods (LibCST's typed visitor defines a no-op for every
    node type: calling those for every node of every rule costs more than the rules)."""
    return [
        getattr(visitor, name)
        for visitor in visitors
        if getattr(type(visitor), name, _NO_OP) is not getattr(_TYPED_DEFAULTS, name, _NO_OP)
    ]


_TYPED_DEFAULTS = CSTTypedVisitorFunctions
_NO_OP = object()


def walk_ast_batched(
    tree: ast.AST,
    visitors: Sequence[object],
    on_error: Callable[[object, Exception], None] | None = None,
    *,
    order: Mapping[ast.AST, int] | None = None,
    last: Mapping[ast.AST, int] | None = None,
) -> None:
    """:func:`walk_batched` for Python's ``ast``: one depth-first walk in source order
    calling each visitor's own ``visit_<Type>`` before a node's children and
    ``leave_<Type>`` after them. A visitor that raises is handed to ``on_error`` (when
    given) and visits nothing more; the others go on.

    ``order`` (every node of ``tree`` -> its pre-order index, in pre-order) and ``last``
    (node -> the index of the last node of its subtree) come from the analysis's one
    traversal (:class:`gradfix.semantic.Semantic`): the walk then only reads that list
    instead of traversing the tree again. Without them the tree is traversed."""
    if order is None or last is None:
        order, last = _pre_order(tree)
    live = list(visitors)
    visits: dict[type, tuple[Callable[[ast.AST], object], ...]] = {}
    leaves: dict[type, tuple[Callable[[ast.AST], object], ...]] = {}

    def handlers(
        table: dict[type, tuple[Callable[[ast.AST], object], ...]], prefix: str, kind: type
    ):  # type: ignore[no-untyped-def]
        name = prefix + kind.__name__
        found = table[kind] = tuple(
            getattr(visitor, name) for visitor in live if hasattr(type(visitor), name)
        )
        return found

    def call(found: tuple[Callable[[ast.AST], object], ...], node: ast.AST) -> None:
        for handler in found:
            visitor = handler.__self__  # type: ignore[attr-defined]
            if visitor not in live:
                continue  # raised earlier in this very dispatch
            try:
                handler(node)
            except Exception as error:
                if on_error is None:
                    raise
                on_error(visitor, error)
                live.remove(visitor)
                visits.clear()  # rebuilt without it
                leaves.clear()

    open_nodes: list[ast.AST] = []  # nodes whose ``leave_`` is due after their subtree
    for index, node in enumerate(order):
        while open_nodes and last[open_nodes[-1]] < index:
            done = open_nodes.pop()
            kind = type(done)
            call(leaves[kind] if kind in leaves else handlers(leaves, "leave_", kind), done)
        kind = type(node)
        found = visits[kind] if kind in visits else handlers(visits, "visit_", kind)
        if found:
            call(found, node)
        ending = leaves[kind] if kind in leaves else handlers(leaves, "leave_", kind)
        if ending:
            open_nodes.append(node)
    while open_nodes:
        done = open_nodes.pop()
        call(
            leaves[type(done)] if type(done) in leaves else handlers(leaves, "leave_", type(done)),
            done,
        )


def _pre_order(tree: ast.AST) -> tuple[dict[ast.AST, int], dict[ast.AST, int]]:
    """Every node -> its pre-order index (in source order), and -> the last index of its
    subtree: what :func:`walk_ast_batched` walks when no analysis gives it."""
    from gradfix.semantic.syntax import source_children

    order: dict[ast.AST, int] = {}
    last: dict[ast.AST, int] = {}
    stack: list[tuple[ast.AST, bool]] = [(tree, False)]
    while stack:
        node, leaving = stack.pop()
        if leaving:
            last[node] = len(order) - 1
            continue
        order[node] = len(order)
        stack.append((node, True))
        stack.extend((child, False) for child in reversed(source_children(node)))
    return order, last
