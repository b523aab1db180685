"""The base of :class:`~gradfix.semantic.Semantic`: the collected facts, tree navigation,
scopes and which binding of a name reaches a use."""

from __future__ import annotations

import ast
import bisect
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, TypeVar

from gradfix.semantic.collect import Collector
from gradfix.semantic.scopes import Binding, LeafReason, Scope
from gradfix.semantic.syntax import iterates_at_least_once, source_segment, spelled_names

_Node = TypeVar("_Node", bound=ast.AST)

_BLOCKS_THAT_MAY_NOT_RUN = (
    ast.If,
    ast.While,
    ast.Try,
    ast.FunctionDef,
    ast.AsyncFunctionDef,
    ast.Lambda,
)
#: blocks that may run zero times (``while`` is in :data:`_BLOCKS_THAT_MAY_NOT_RUN`)
_LOOPS = (ast.For, ast.AsyncFor)


class Navigation:
    """Facts of the one traversal and the questions they answer directly."""

    def __init__(
        self, tree: ast.Module, source: str, walked: frozenset[type] = frozenset()
    ) -> None:
        collector = Collector(walked)
        collector.collect(tree)
        #: the node types of :attr:`walked_nodes`, and those nodes in pre-order
        self.walked_types = walked
        self.walked_nodes = collector.walked
        self.module = tree
        self.source = source
        self._parents = collector.parents
        self._order = collector.order
        self._last = collector.last
        self._by_type = collector.by_type
        self._scopes = collector.scopes
        self._calls_by_name = collector.calls_by_name
        self._super_calls = collector.super_calls
        #: node -> the scope it is evaluated in (a scope node's own is its parent's), for
        #: the nodes asked about and their ancestors (:meth:`scope_of`)
        self._node_scopes: dict[ast.AST, Scope] = {}
        self._names = collector.names
        self._name_orders = collector.name_orders
        self._attributes = collector.attributes
        self._subscript_assigns = collector.subscript_assigns
        self._class_attrs = collector.class_attrs
        self._returns = collector.returns
        self._generators = collector.generators
        self._imports = collector.imports
        #: every name an import binds somewhere in the file: a name outside it is no
        #: imported name in any scope (:meth:`qualified_name`'s first question)
        self._imported_names = frozenset(binding.name for binding in collector.imports)
        self._no_grad_cache: dict[ast.AST, bool] = {}
        #: node -> the ``with`` or function deciding the grad mode of what it holds
        self._grad_deciders: dict[ast.AST, ast.AST | None] = {}
        self._with_modes: dict[ast.AST, bool] = {}  # a ``with`` that sets a grad mode
        #: functions of other files' call sites all run under ``no_grad`` (by name: the
        #: project pass of :mod:`gradfix.project`); empty when this file is checked alone
        self.no_grad_callers: frozenset[str] = frozenset()
        #: functions whose grad mode was asked and that no call site of this file decides:
        #: what other files' callers could change (:mod:`gradfix.project`)
        self.open_functions: set[ast.AST] = set()
        self._requires_grad_cache: dict[ast.AST, list[tuple[ast.AST, bool]]] = {}
        self._requires_grad_memo: dict[tuple[ast.AST, ast.AST, int], bool] = {}
        #: (expr, at) pairs whose ``is_tensor`` is being answered: asking again is a cycle
        self._is_tensor_asked: set[tuple[ast.AST, ast.AST]] = set()
        self._qualified: dict[ast.AST, str | None] = {}  # qualified_name by node
        #: super-call name -> base name -> ``super().<name>()`` in classes deriving from it
        self._supers_by_base: dict[str, dict[str, list[ast.Call]]] = {}
        #: reaching_binding by (name, where asked)
        self._reaching: dict[tuple[ast.AST, ast.AST], Binding | None] = {}
        #: a name's qualified name by (scope it is read in, spelling): the same in the scope
        self._qualified_in_scope: dict[tuple[int, str], str | None] = {}

    @property
    def order(self) -> dict[ast.AST, int]:
        """Every node -> its pre-order index in source order; iterates in pre-order (the
        rules' walk reads it instead of traversing the tree again)."""
        return self._order

    def segment(self, node: ast.AST) -> str | None:
        """``ast.get_source_segment(source, node)``, quickly (see ``source_segment``)."""
        return source_segment(self.source, node)

    @property
    def last(self) -> dict[ast.AST, int]:
        """Every node -> the pre-order index of the last node of its subtree."""
        return self._last

    @property
    def by_type(self) -> dict[type, list[ast.AST]]:
        """Node type -> its nodes in pre-order (the rules' walk visits only the types some
        rule handles)."""
        return self._by_type

    if TYPE_CHECKING:  # answered by the other mixins of ``Semantic``

        def qualified_name(self, expr: ast.AST) -> str | None: ...
        def call_name(self, call: ast.Call) -> str | None: ...
        def is_torch_name(self, expr: ast.AST, *names: str) -> bool: ...
        def is_tensor(self, expr: ast.AST, at: ast.AST | None = None, _depth: int = 0) -> bool: ...
        def requires_grad(
            self, expr: ast.AST, at: ast.AST | None = None, _depth: int = 0
        ) -> bool: ...
        def leaf_reason(
            self, expr: ast.AST, at: ast.AST | None = None, _depth: int = 0
        ) -> LeafReason | None: ...
        def leaf_value_reason(
            self, value: ast.AST, at: ast.AST, _depth: int = 0
        ) -> LeafReason | None: ...
        def is_nn_layer(self, expr: ast.AST, at: ast.AST, _depth: int = 0) -> bool: ...
        def is_module(self, expr: ast.AST, at: ast.AST, _depth: int = 0) -> bool: ...
        def is_module_base(self, base: ast.AST) -> bool: ...
        def returned_values(
            self, call: ast.Call, at: ast.AST, unpack_index: int | None = None
        ) -> list[tuple[ast.expr, ast.AST]] | None: ...
        def unpacked_call_values(
            self, binding: Binding
        ) -> list[tuple[ast.expr, ast.AST]] | None: ...
        def passed_arguments(self, param: ast.arg) -> list[tuple[ast.expr, ast.Call]]: ...
        def self_attribute_values(
            self, attr: ast.Attribute, at: ast.AST
        ) -> list[tuple[ast.expr, Binding]]: ...
        def is_self(self, expr: ast.AST, at: ast.AST) -> bool: ...
        def parameter_iteration(
            self, iterable: ast.expr, unpack_index: int | None, depth: int
        ) -> LeafReason | None: ...

    # -- tree navigation -------------------------------------------------------------------
    def parent(self, node: ast.AST) -> ast.AST | None:
        return self._parents.get(node)

    def ancestors(self, node: ast.AST) -> Iterator[ast.AST]:
        current = self._parents.get(node)
        while current is not None:
            yield current
            current = self._parents.get(current)

    def index(self, node: ast.AST) -> int:
        """Pre-order position of ``node``: textual order of the source."""
        return self._order[node]

    def end_index(self, node: ast.AST) -> int:
        return self._last[node]

    def contains(self, outer: ast.AST, inner: ast.AST) -> bool:
        return self._order[outer] <= self._order[inner] <= self._last[outer]

    def attributes_named(self, attr: str) -> list[ast.Attribute]:
        """Every ``<expr>.<attr>`` of the file, in source order (from the index, no walk)."""
        return list(self._attributes.get(attr, ()))

    def outside_nested(
        self, root: ast.AST, nodes: Sequence[_Node], nested: tuple[type, ...]
    ) -> list[_Node]:
        """``nodes`` (under ``root``) that no node of the types ``nested`` below ``root``
        holds: what runs where ``root`` runs, not in a lambda or comprehension of it."""
        inner: list[tuple[int, int]] = []
        for kind in nested:
            below: list[ast.AST] = self.descendants(root, kind)
            inner += [(self._order[n], self._last[n]) for n in below if n is not root]
        if not inner:
            return list(nodes)
        order = self._order
        return [n for n in nodes if not any(a < order[n] <= b for a, b in inner)]

    def descendants(self, root: ast.AST, kind: type[_Node]) -> list[_Node]:
        """The nodes of exactly type ``kind`` in ``root``'s subtree (``root`` included), in
        pre-order: ``[n for n in ast.walk(root) if type(n) is kind]`` in source order,
        without walking (two bisections in the analysis's nodes of that type)."""
        nodes = self._by_type.get(kind, [])
        index = self._order.__getitem__
        low = bisect.bisect_left(nodes, self._order[root], key=index)
        high = bisect.bisect_right(nodes, self._last[root], lo=low, key=index)
        return nodes[low:high]  # type: ignore[return-value]

    def block_contains(self, block: list[ast.stmt], inner: ast.AST) -> bool:
        """``inner`` sits in one of the statements of ``block`` (a body, an ``orelse``)."""
        if not block:
            return False
        return self._order[block[0]] <= self._order[inner] <= self._last[block[-1]]

    def spellings_in(self, root: ast.AST, name: str) -> list[ast.AST]:
        """Every node under ``root`` (``root`` included) that spells the identifier ``name``
        (:func:`spelled_names`: a variable, an attribute, a keyword, a parameter, a
        definition, an import...), in source order; from an index built once per file."""
        spelled: dict[str, list[ast.AST]] | None = self.__dict__.get("_spelled")
        if spelled is None:
            spelled = self.__dict__["_spelled"] = {}
            for node in self._order:  # pre-order
                for word in spelled_names(node):
                    spelled.setdefault(word, []).append(node)
        nodes = spelled.get(name)
        if not nodes or root not in self._order:
            return []
        index = self._order.__getitem__
        low = bisect.bisect_left(nodes, self._order[root], key=index)
        return nodes[low : bisect.bisect_right(nodes, self._last[root], lo=low, key=index)]

    def name_nodes_in(self, root: ast.AST, name: str) -> list[ast.Name]:
        """Every ``Name`` node spelled ``name`` under ``root`` (``root`` included), in
        source order; from the index of the one traversal, nothing is walked."""
        orders = self._name_orders.get(name)
        if not orders or root not in self._order:
            return []
        first = bisect.bisect_left(orders, self._order[root])
        return self._names[name][first : bisect.bisect_right(orders, self._last[root])]

    def scope_of(self, node: ast.AST) -> Scope:
        """The scope ``node`` is evaluated in (a scope node's own is its parent's)."""
        known = self._node_scopes.get(node)
        if known is not None:
            return known
        # the scope of the nearest ancestor that opens one (or whose scope is known),
        # remembered for the nodes on the way: asked for the names of a few nodes only,
        # not recorded for every node by the traversal
        passed = [node]
        scopes, node_scopes, parents = self._scopes, self._node_scopes, self._parents
        current = parents.get(node)
        while current is not None:
            if current in scopes:
                known = scopes[current]
                break
            known = node_scopes.get(current)
            if known is not None:
                break
            passed.append(current)
            current = parents.get(current)
        else:
            known = scopes[self.module]
        for below in passed:
            node_scopes[below] = known
        return known

    def enclosing_statement(self, node: ast.AST) -> ast.stmt | None:
        """The innermost statement holding ``node`` (``node`` itself if a statement)."""
        for ancestor in [node, *self.ancestors(node)]:
            if isinstance(ancestor, ast.stmt):
                return ancestor
        return None

    def enclosing_function(self, node: ast.AST) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        for ancestor in self.ancestors(node):
            if type(ancestor) is ast.FunctionDef or type(ancestor) is ast.AsyncFunctionDef:
                return ancestor
        return None

    def enclosing_class(self, node: ast.AST) -> ast.ClassDef | None:
        for ancestor in self.ancestors(node):
            if type(ancestor) is ast.ClassDef:
                return ancestor
        return None

    def method_class(self, func: ast.AST) -> ast.ClassDef | None:
        """The class whose body defines ``func``: None for a plain function, also for one
        nested in a method (``enclosing_class`` would name the method's class)."""
        owner = self._parents.get(func)
        if type(owner) is ast.ClassDef and func in owner.body:
            return owner
        return None

    def calls_named(self, name: str) -> list[ast.Call]:
        """Every call in this file that may run a function called ``name`` defined
        elsewhere: ``name(x)``, ``obj.name(x)``, ``super().name(x)``, ``apply(name)``."""
        return [*self._calls_by_name.get(name, ()), *self._super_calls.get(name, ())]

    def call_sites(self, func: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.Call]:
        """The calls in this file that may run ``func``, in order: those by its name
        (``f(x)``, ``obj.f(x)``, ``apply(f)``), and for a method, ``super().f(x)`` in the
        classes that name its class as a base."""
        sites = self._calls_by_name.get(func.name, [])
        cls = self.method_class(func)
        supers = self._super_calls.get(func.name) if cls is not None else None
        if not supers:
            return sites
        derived = self._super_calls_deriving(func.name, cls.name)  # type: ignore[union-attr]
        return sorted(sites + derived, key=self._order.__getitem__) if derived else sites

    def _super_calls_deriving(self, name: str, base: str) -> list[ast.Call]:
        """``super().<name>(...)`` in the classes that name ``base`` among their bases
        (``class B(A)``, ``class B(mod.A)``), in order. Indexed by base once per name: a
        file's ``__init__`` methods would otherwise each scan every ``super().__init__``."""
        by_base = self._supers_by_base.get(name)
        if by_base is None:
            by_base = self._supers_by_base[name] = {}
            for call in self._super_calls.get(name, ()):
                cls = self.enclosing_class(call)
                for spelled in _base_names(cls) if cls is not None else ():
                    calls = by_base.setdefault(spelled, [])
                    if not calls or calls[-1] is not call:  # ``class B(A, mod.A)``: once
                        calls.append(call)
        return by_base.get(base, [])

    # -- names -----------------------------------------------------------------------------
    def bindings(self, name: ast.Name) -> list[Binding]:
        """All bindings of ``name`` in the scope Python would look it up in."""
        scope: Scope | None = self.scope_of(name)
        from_inner = False
        while scope is not None:
            if not (scope.is_class and from_inner) and name.id in scope.bindings:
                return scope.bindings[name.id]
            from_inner = from_inner or not scope.is_class
            scope = scope.parent
        return []

    def reaching_binding(self, name: ast.Name, at: ast.AST | None = None) -> Binding | None:
        """The binding of ``name`` that textually precedes ``at`` (default: the name).

        A binding in one branch of an ``if`` does not reach a use in another branch.
        Remembered: rules ask again about half of the pairs."""
        at = at if at is not None else name
        key = (name, at)
        if key in self._reaching:
            return self._reaching[key]
        position = self._order[at]
        found: Binding | None = None
        # A scope's bindings of a name are in source order (recorded in pre-order): the
        # latest one that reaches wins, the first of a statement's several (``a, a = ...``)
        for binding in reversed(self.bindings(name)):
            if found is not None and binding.start < found.start:
                break
            if binding.kind == "augassign" or binding.end >= position:
                continue
            if not self._exclusive(binding.node, at):
                found = binding
        self._reaching[key] = found
        return found

    def reaching_bindings(self, name: ast.Name, at: ast.AST | None = None) -> list[Binding]:
        """Every binding of ``name`` that may reach ``at``, the nearest first: the one
        :meth:`reaching_binding` gives, then earlier ones for as long as the later ones may
        not have run (they sit in an ``if``, a loop or a ``try`` that does not hold ``at``).
        Both branches of one ``if`` binding the name end the search.

        ``if use_mask: m = masks[i]`` / ``else: m = torch.ones(n)``: both values."""
        at = at if at is not None else name
        position = self._order[at]
        candidates = sorted(
            (
                b
                for b in self.bindings(name)
                if b.kind != "augassign" and b.end < position and not self._exclusive(b.node, at)
            ),
            key=lambda b: b.start,
            reverse=True,
        )
        found: list[Binding] = []
        branches: dict[ast.If, set[str]] = {}
        for binding in candidates:
            found.append(binding)
            conditions = [
                a
                for a in self._ancestors_until(binding.node, at)
                if isinstance(a, _BLOCKS_THAT_MAY_NOT_RUN + _LOOPS)
            ]
            if not conditions:
                break
            branch = self._direct_branch(conditions, binding.node)
            if branch is not None:
                branches.setdefault(branch[0], set()).add(branch[1])
                if branches[branch[0]] == {"body", "orelse"}:
                    break
        return found

    def _ancestors_until(self, node: ast.AST, at: ast.AST) -> list[ast.AST]:
        """The ancestors of ``node`` below the first one that holds ``at``."""
        found = []
        for ancestor in self.ancestors(node):
            if self.contains(ancestor, at):
                break
            found.append(ancestor)
        return found

    def _direct_branch(
        self, conditions: Sequence[ast.AST], node: ast.AST
    ) -> tuple[ast.If, str] | None:
        """(the ``if``, 'body' or 'orelse') when the only condition on ``node`` is one ``if``
        whose branch holds ``node``'s statement directly."""
        if len(conditions) != 1 or type(conditions[0]) is not ast.If:
            return None
        branch = conditions[0]
        statement = node if isinstance(node, ast.stmt) else self.enclosing_statement(node)
        for field in ("body", "orelse"):
            if any(s is statement for s in getattr(branch, field)):
                return branch, field
        return None

    def in_exclusive_branches(self, first: ast.AST, second: ast.AST) -> bool:
        """``first`` and ``second`` sit in different branches of one ``if``: never both run."""
        return self._exclusive(first, second)

    def _exclusive(self, binding: ast.AST, use: ast.AST) -> bool:
        """``binding`` and ``use`` sit in different branches of the same ``if``."""
        for ancestor in self.ancestors(binding):
            if type(ancestor) is ast.If and self.contains(ancestor, use):
                in_orelse = self.block_contains(ancestor.orelse, binding)
                use_in_orelse = self.block_contains(ancestor.orelse, use)
                use_in_body = self.block_contains(ancestor.body, use)
                return (in_orelse and use_in_body) or (not in_orelse and use_in_orelse)
        return False

    def runs_once(self, node: ast.AST, binding: ast.AST) -> bool:
        """``node`` runs at least once whenever ``binding`` ran (same block or a ``for``
        over a non-empty literal range between them)."""
        for ancestor in self.ancestors(node):
            if self.contains(ancestor, binding):
                return True
            if isinstance(ancestor, _BLOCKS_THAT_MAY_NOT_RUN):
                return False
            is_loop = type(ancestor) is ast.For or type(ancestor) is ast.AsyncFor
            if is_loop and not iterates_at_least_once(ancestor.iter):  # type: ignore[attr-defined]
                return False
        return False

    # -- blocks as LibCST holds them -------------------------------------------------------
    def statement_block(self, statement: ast.stmt) -> list[ast.stmt] | None:
        """The statements of the block holding ``statement`` (a body, an ``orelse``, a
        handler's body, the module's body); None for an ``elif``, which LibCST keeps in its
        ``if`` rather than in a block."""
        owner = self._parents.get(statement)
        for field in ("body", "orelse", "finalbody"):
            block = getattr(owner, field, None)
            if type(block) is list and any(s is statement for s in block):
                if field == "orelse" and type(owner) is ast.If and self._is_elif(statement):
                    return None
                return block
        return None

    def in_one_line_suite(self, statement: ast.stmt) -> bool:
        """``statement`` is in a block written on its header's line (``if c: x; y``), which
        LibCST holds in a ``SimpleStatementSuite`` instead of statement lines."""
        block = self.statement_block(statement)
        if not block or type(self._parents.get(statement)) is ast.Module:
            return False
        return bool(self._text_before(block[0]).strip())

    def _is_elif(self, statement: ast.stmt) -> bool:
        line = self._source_line(statement.lineno).encode("utf-8")
        return line[statement.col_offset :].startswith(b"elif")

    def _text_before(self, node: ast.stmt) -> bytes:
        """The text of ``node``'s first line before it (``ast`` columns count bytes)."""
        return self._source_line(node.lineno).encode("utf-8")[: node.col_offset]

    def _source_line(self, number: int) -> str:
        lines: list[str] | None = self.__dict__.get("_lines")
        if lines is None:  # the line breaks Python's tokenizer counts
            text = self.source.replace("\r\n", "\n").replace("\r", "\n")
            lines = self.__dict__["_lines"] = text.split("\n")
        return lines[number - 1] if 0 < number <= len(lines) else ""


def _base_names(cls: ast.ClassDef) -> list[str]:
    """The names ``cls`` spells its bases with (``A`` of ``class B(A)`` and of ``class
    B(mod.A)``)."""
    return [
        b.id if type(b) is ast.Name else b.attr  # type: ignore[union-attr]
        for b in cls.bases
        if type(b) is ast.Name or type(b) is ast.Attribute
    ]
