"""Walking trees without rebuilding them.

- :func:`walk_ast_batched`: the rules' one walk over a file's ``ast`` (in source order,
  read from the analysis's pre-order), calling each rule's ``visit_<Type>`` and
  ``leave_<Type>``; a rule that raises is dropped and the others go on.
- :func:`children`: the code children of a LibCST node, in LibCST's order, without
  whitespace, comments and tokens (:func:`trivia_types`): what the fix side uses to find a
  node's parent (``node.visit`` would rebuild every node of the tree).
"""

from __future__ import annotations

import ast
import functools
import inspect
import itertools
import textwrap
from collections.abc import Callable, Iterable, Mapping, Sequence

import libcst as cst

from gradfix import pyast


@functools.cache
def trivia_types() -> tuple[type[cst.CSTNode], ...]:
    """Node types that are never visited: layout and tokens, not code."""
    return (
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
    for call in ast.walk(pyast.parse(source)):
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


@functools.cache
def code_types() -> frozenset[type]:
    """Every node type that is visited (exact types: ``isinstance`` on LibCST's abstract
    classes is slow, and the walk asks it for every child)."""
    trivia: set[type] = set().union(*(_concrete(t) for t in trivia_types()))
    return frozenset(_concrete(cst.CSTNode) - trivia)


def children(node: cst.CSTNode) -> list[cst.CSTNode]:
    """The code children of ``node`` in source order (no whitespace or tokens)."""
    found: list[cst.CSTNode] = []
    code = code_types()
    for name in child_fields(type(node)):
        value = getattr(node, name)
        if type(value) in code:
            found.append(value)
        elif type(value) is tuple or type(value) is list:
            found.extend(item for item in value if type(item) in code)
    return found


def walk_ast_batched(
    tree: ast.AST,
    visitors: Sequence[object],
    on_error: Callable[[object, Exception], None] | None = None,
    *,
    order: Mapping[ast.AST, int] | None = None,
    last: Mapping[ast.AST, int] | None = None,
    by_type: Mapping[type, list[ast.AST]] | None = None,
    call_aliases: Mapping[str, tuple[str, ...]] | None = None,
    filter_assigns: bool = True,
    walked: tuple[frozenset[type], Sequence[ast.AST]] | None = None,
) -> None:
    """:func:`walk_batched` for Python's ``ast``: one depth-first walk in source order
    calling each visitor's own ``visit_<Type>`` before a node's children and
    ``leave_<Type>`` after them. A visitor that raises is handed to ``on_error`` (when
    given) and visits nothing more; the others go on.

    ``order`` (every node of ``tree`` -> its pre-order index, in pre-order) and ``last``
    (node -> the index of the last node of its subtree) come from the analysis's one
    traversal (:class:`gradfix.semantic.Semantic`): the walk then only reads that list
    instead of traversing the tree again. With ``by_type`` too (node type -> its nodes in
    pre-order), only the nodes of the types some visitor handles are walked (most nodes
    are names and constants no rule visits). With ``walked`` (node types, and every node
    of those types in pre-order: :attr:`gradfix.semantic.Semantic.walked_nodes`, listed
    during the analysis's traversal for :func:`walked_types` of the visitors), those nodes
    are walked when the types hold every type a visitor handles (nothing is sorted).
    Without them the tree is traversed.

    With ``call_aliases`` (a name an import binds -> the last parts of what it imports:
    ``w`` -> ``("where",)`` for ``from torch import where as w``), a visitor whose type has a
    ``calls`` set (:attr:`gradfix.rule.Rule.calls`) gets ``visit_Call`` only for the
    calls spelled with one of those names (``torch.where(...)``, ``x.where(...)``,
    ``where(...)``, ``w(...)``): most calls concern a few rules. A visitor with a
    ``takes_call(spelled, aliased)`` method gets only the calls it answers True for (asked
    once per spelling and file; ``""`` for a callee that is no name).

    A visitor whose type has an ``assign_targets`` set (:attr:`gradfix.rule.Rule.assign_targets`)
    gets ``visit_Assign`` only for the assignments to one target of those types, and for
    those to several targets (``a = b = v``); ``filter_assigns=False`` hands it every one."""
    if order is None or last is None:
        order, last = _pre_order(tree)
    nodes: Iterable[ast.AST] = order
    if walked is not None and walked_types(tuple(type(v) for v in visitors)) <= walked[0]:
        nodes = walked[1]
    elif by_type is not None:
        nodes = _handled_nodes(visitors, order, by_type)
    live = list(visitors)
    dead: set[int] = set()  # ids of the visitors that raised
    live_kinds = [tuple(type(visitor) for visitor in live)]  # the key of their handlers
    filtering = call_aliases is not None and any(
        getattr(type(visitor), "calls", None) is not None
        or getattr(visitor, "takes_call", None) is not None
        for visitor in visitors
    )
    takes = [_call_narrowers(live)]
    by_spelling: dict[str, tuple[Callable[[ast.AST], object], ...]] = {}  # Call handlers
    filtering_assigns = filter_assigns and any(
        getattr(type(visitor), "assign_targets", None) is not None for visitor in visitors
    )
    #: Assign handlers by the type of the one target (None: several targets)
    by_target: dict[type | None, tuple[Callable[[ast.AST], object], ...]] = {}

    # which visitors (by position) handle what: the same for every file these visitor
    # types walk, kept per process (asked once per node type, call spelling or target)
    owners_of = [_owner_table(live_kinds[0])]

    def assign_handlers(target: type | None) -> tuple[Callable[[ast.AST], object], ...]:
        owners = owners_of[0].get(target, None)
        if owners is None:
            owners = owners_of[0][target] = _assign_owners(live_kinds[0], target)
        found = by_target[target] = tuple(live[index].visit_Assign for index in owners)  # type: ignore[attr-defined]
        return found

    def call_handlers(spelled: str) -> tuple[Callable[[ast.AST], object], ...]:
        assert call_aliases is not None
        key = (spelled, call_aliases.get(spelled, ()))
        owners = owners_of[0].get(key)
        if owners is None:
            owners = owners_of[0][key] = _call_owners(live_kinds[0], *key)
        narrowing = takes[0]
        if narrowing is not None:
            owners = tuple(
                index
                for index in owners
                if (takes_call := narrowing[index]) is None or takes_call(*key)
            )
        found = by_spelling[spelled] = tuple(live[index].visit_Call for index in owners)  # type: ignore[attr-defined]
        return found

    visits: dict[type, tuple[Callable[[ast.AST], object], ...]] = {}
    leaves: dict[type, tuple[Callable[[ast.AST], object], ...]] = {}

    def handlers(
        table: dict[type, tuple[Callable[[ast.AST], object], ...]], prefix: str, kind: type
    ):  # type: ignore[no-untyped-def]
        name = prefix + kind.__name__
        owners = owners_of[0].get(name)
        if owners is None:
            owners = owners_of[0][name] = _owners(live_kinds[0], name)
        found = table[kind] = tuple(getattr(live[index], name) for index in owners)
        return found

    def call(found: tuple[Callable[[ast.AST], object], ...], node: ast.AST) -> None:
        if not dead:
            try:  # no visitor has raised yet (the usual case): no bookkeeping per handler
                for handler in found:
                    handler(node)
                return
            except Exception as error:
                if on_error is None:
                    raise
                failed = handler.__self__  # type: ignore[attr-defined]
                drop(failed, error)
                found = found[found.index(handler) + 1 :]  # the others still see ``node``
        for handler in found:
            visitor = handler.__self__  # type: ignore[attr-defined]
            if dead and id(visitor) in dead:
                continue  # raised earlier in this very dispatch
            try:
                handler(node)
            except Exception as error:
                if on_error is None:
                    raise
                drop(visitor, error)

    def drop(visitor: object, error: Exception) -> None:
        assert on_error is not None
        on_error(visitor, error)
        dead.add(id(visitor))
        live.remove(visitor)
        live_kinds[0] = tuple(type(visitor) for visitor in live)
        owners_of[0] = _owner_table(live_kinds[0])
        takes[0] = _call_narrowers(live)
        visits.clear()  # rebuilt without it
        by_spelling.clear()
        by_target.clear()
        leaves.clear()

    open_nodes: list[ast.AST] = []  # nodes whose ``leave_`` is due after their subtree
    for node in nodes:
        index = order[node]
        while open_nodes and last[open_nodes[-1]] < index:
            done = open_nodes.pop()
            kind = type(done)
            call(leaves[kind] if kind in leaves else handlers(leaves, "leave_", kind), done)
        kind = type(node)
        if kind is ast.Call and filtering:
            func = node.func  # type: ignore[attr-defined]
            spelled = (
                func.attr
                if type(func) is ast.Attribute
                else func.id
                if type(func) is ast.Name
                else ""
            )
            found = by_spelling[spelled] if spelled in by_spelling else call_handlers(spelled)
        elif kind is ast.Assign and filtering_assigns:
            targets = node.targets  # type: ignore[attr-defined]
            target = type(targets[0]) if len(targets) == 1 else None
            found = by_target[target] if target in by_target else assign_handlers(target)
        else:
            found = visits[kind] if kind in visits else handlers(visits, "visit_", kind)
        if found:
            if dead:
                call(found, node)
            else:
                try:  # :func:`call`'s usual case, inline: one function call less per node
                    for handler in found:
                        handler(node)
                except Exception as error:
                    if on_error is None:
                        raise
                    drop(handler.__self__, error)  # type: ignore[attr-defined]
                    call(found[found.index(handler) + 1 :], node)  # the others still see it
        ending = leaves[kind] if kind in leaves else handlers(leaves, "leave_", kind)
        if ending:
            open_nodes.append(node)
    while open_nodes:
        done = open_nodes.pop()
        call(
            leaves[type(done)] if type(done) in leaves else handlers(leaves, "leave_", type(done)),
            done,
        )


@functools.lru_cache(maxsize=256)
def walked_types(visitor_types: tuple[type, ...]) -> frozenset[type]:
    """The node types visitors of ``visitor_types`` handle (:func:`handled_types`): what
    the analysis lists for their walk (``Semantic(..., walked=...)``)."""
    return frozenset().union(*map(handled_types, visitor_types))


def _call_narrowers(visitors: Sequence[object]) -> list[Callable[..., bool] | None] | None:
    """Each visitor's ``takes_call`` (None: it has none), by position; None when no
    visitor has one."""
    found = [getattr(visitor, "takes_call", None) for visitor in visitors]
    return found if any(found) else None


def _handled_nodes(
    visitors: Sequence[object],
    order: Mapping[ast.AST, int],
    by_type: Mapping[type, list[ast.AST]],
) -> list[ast.AST]:
    """The nodes of the types the visitors handle, in pre-order."""
    kinds = walked_types(tuple(type(visitor) for visitor in visitors))
    groups = [by_type[kind] for kind in kinds if kind in by_type]
    if len(groups) == 1:
        return groups[0]
    return sorted(itertools.chain.from_iterable(groups), key=order.__getitem__)


_HANDLED: dict[type, frozenset[type]] = {}

#: visitor types -> what each handles: a handler's name (``"visit_Call"``), a call's
#: ``(spelling, aliased names)``, an assignment's target type -> the positions of the
#: visitor types that handle it. The same for every file a set of rules walks; looked up
#: with one hash of the visitor types per walk (hashing them at every question cost more
#: than the answer). Bounded: a language server walks for as long as it runs.
_OWNER_TABLES: dict[tuple[type, ...], dict[object, tuple[int, ...]]] = {}


def _owner_table(kinds: tuple[type, ...]) -> dict[object, tuple[int, ...]]:
    table = _OWNER_TABLES.get(kinds)
    if table is None or len(table) > 16384:
        if len(_OWNER_TABLES) >= 64:
            _OWNER_TABLES.clear()
        table = _OWNER_TABLES[kinds] = {}
    return table


@functools.lru_cache(maxsize=1024)
def _owners(kinds: tuple[type, ...], name: str) -> tuple[int, ...]:
    """The positions in ``kinds`` of the visitor types that define ``name``."""
    return tuple(i for i, kind in enumerate(kinds) if hasattr(kind, name))


def _call_owners(
    kinds: tuple[type, ...], spelled: str, aliased: tuple[str, ...]
) -> tuple[int, ...]:
    """The positions in ``kinds`` of the visitor types whose ``visit_Call`` takes a call
    spelled ``spelled`` (an import alias of ``aliased``): those without a ``calls`` set,
    and those whose set holds one of those names."""
    names = {spelled, *aliased}
    return tuple(
        index
        for index in _owners(kinds, "visit_Call")
        if (wanted := getattr(kinds[index], "calls", None)) is None or not names.isdisjoint(wanted)
    )


def _assign_owners(kinds: tuple[type, ...], target: type | None) -> tuple[int, ...]:
    """The positions in ``kinds`` of the visitor types whose ``visit_Assign`` takes an
    assignment to one target of type ``target`` (None: to several targets): those without
    an ``assign_targets`` set, and those whose set holds ``target``."""
    return tuple(
        index
        for index in _owners(kinds, "visit_Assign")
        if target is None
        or (wanted := getattr(kinds[index], "assign_targets", None)) is None
        or target in wanted
    )


def handled_types(visitor_type: type) -> frozenset[type]:
    """The ``ast`` node types ``visitor_type`` has a ``visit_<Type>`` or ``leave_<Type>``
    for (a name that is no ``ast`` node type is never called)."""
    known = _HANDLED.get(visitor_type)
    if known is not None:
        return known
    found: set[type] = set()
    for name in dir(visitor_type):
        prefix, _, kind_name = name.partition("_")
        if prefix in ("visit", "leave") and kind_name:
            kind = vars(ast).get(kind_name)
            if isinstance(kind, type) and issubclass(kind, ast.AST):
                found.add(kind)
    known = _HANDLED[visitor_type] = frozenset(found)
    return known


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
