"""Semantics-preserving variants of Python sources, for tests/test_properties.py.

Each transform takes source text and returns source text that Python runs the same way:

- :func:`rename`: a consistent renaming of user identifiers (``mapping`` old -> new);
- :func:`apply_aliases`: torch imported under other names or in the other import form,
  every use rewritten accordingly (``import torch as th``, ``from torch import nn as tnn``,
  ``import torch.nn as nn`` <-> ``from torch import nn``);
- :func:`nest`: statements wrapped in a function (called), a method, ``if True:``,
  ``for _ in range(1):`` or ``with contextlib.nullcontext():``;
- :func:`reformat`: blank lines, spaces inside brackets, line breaks inside calls,
  trailing commas, spacing around ``=``;
- :func:`add_comments`: comments on their own lines, at line ends, inside calls.

The transforms are LibCST transformers, so their output stays valid; the hypothesis
strategies that draw their parameters are at the end. ``rename`` and ``apply_aliases``
take an explicit plan so that the same rewrite can be applied to a fixed text too.
"""

from __future__ import annotations

import ast
import builtins
import functools
import io
import keyword
import random
import textwrap
import tokenize
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import libcst as cst
from hypothesis import strategies as st

from gradfix.rule import Rule

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"

#: Names never renamed: builtins, and conventional receivers (renaming ``self`` is legal
#: Python, but no one writes it and rules may rightly key on it).
RESERVED = frozenset(dir(builtins)) | frozenset(keyword.kwlist) | frozenset(keyword.softkwlist)
RESERVED |= {"self", "cls", "torch", "nn", "F", "np", "math", "contextlib", "_"}


@functools.lru_cache(maxsize=1024)
def parse(source: str) -> cst.Module:
    """LibCST's tree of ``source``, cached: the transforms never change a tree in place,
    and the same texts are parsed by several steps and tests."""
    return cst.parse_module(source)


# -- seeds ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Seed:
    rule: type[Rule]
    name: str  # "GF201 INVALID[1]" or "leaf_inplace/seed_fill.before.py"
    source: str

    def __repr__(self) -> str:
        return f"Seed({self.name})"


def seeds_for(rule: type[Rule]) -> list[Seed]:
    """The rule's embedded INVALID examples and its fixtures' ``*.before.py`` files (and
    ``*.report.py`` files: a report-only rule has no ``before`` file)."""
    seeds = [
        Seed(rule, f"{rule.code} INVALID[{index}]", textwrap.dedent(example.code).lstrip("\n"))
        for index, example in enumerate(rule.INVALID)
    ]
    module = rule.__module__.rsplit(".", 1)[-1]
    paths = [*(FIXTURES / module).glob("*.before.py"), *(FIXTURES / module).glob("*.report.py")]
    for path in sorted(paths):
        seeds.append(Seed(rule, f"{module}/{path.name}", path.read_bytes().decode("utf-8")))
    return seeds


# -- identifiers ---------------------------------------------------------------------------
def identifiers(source: str) -> set[str]:
    """Every NAME token of ``source`` (names, attributes, keywords, everything)."""
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return {token.string for token in tokens if token.type == tokenize.NAME}


class _Bindings(cst.CSTVisitor):
    """Names bound by user code (assignments, loops, defs, parameters...) and the names
    that must keep their spelling (imports, keyword arguments, class attributes, methods)."""

    def __init__(self) -> None:
        super().__init__()
        self.bound: set[str] = set()
        self.fixed: set[str] = set()
        self._scopes: list[cst.CSTNode] = []

    def _in_class_body(self) -> bool:
        return bool(self._scopes) and isinstance(self._scopes[-1], cst.ClassDef)

    def _bind(self, target: cst.BaseExpression | cst.BaseAssignTargetExpression) -> None:
        if isinstance(target, cst.Name):
            (self.fixed if self._in_class_body() else self.bound).add(target.value)
        elif isinstance(target, (cst.Tuple, cst.List)):
            for element in target.elements:
                self._bind(element.value)
        elif isinstance(target, cst.StarredElement):
            self._bind(target.value)

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self._bind(node.name)
        self._scopes.append(node)

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        self._scopes.pop()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._bind(node.name)  # a method name is a class attribute: fixed
        self._scopes.append(node)

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self._scopes.pop()

    def visit_Lambda(self, node: cst.Lambda) -> None:
        self._scopes.append(node)

    def leave_Lambda(self, original_node: cst.Lambda) -> None:
        self._scopes.pop()

    def visit_Param(self, node: cst.Param) -> None:
        self.bound.add(node.name.value)

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        self._bind(node.target)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._bind(node.target)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._bind(node.target)

    def visit_For(self, node: cst.For) -> None:
        self._bind(node.target)

    def visit_CompFor(self, node: cst.CompFor) -> None:
        self.bound |= _names_in(node.target)

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self.bound |= _names_in(node.target)

    def visit_AsName(self, node: cst.AsName) -> None:
        self._bind(node.name)  # type: ignore[arg-type]

    def visit_Global(self, node: cst.Global) -> None:
        self.bound |= {item.name.value for item in node.names}

    def visit_Nonlocal(self, node: cst.Nonlocal) -> None:
        self.bound |= {item.name.value for item in node.names}

    def visit_Import(self, node: cst.Import) -> bool:
        self.fixed |= _import_bound(node)
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        self.fixed |= _import_bound(node)
        return False

    def visit_Arg(self, node: cst.Arg) -> None:
        if node.keyword is not None:
            self.fixed.add(node.keyword.value)


def _names_in(node: cst.CSTNode) -> set[str]:
    found: set[str] = set()

    class _Names(cst.CSTVisitor):
        def visit_Name(self, name: cst.Name) -> None:
            found.add(name.value)

    node.visit(_Names())
    return found


def _import_bound(node: cst.Import | cst.ImportFrom) -> set[str]:
    if isinstance(node.names, cst.ImportStar):
        return set()
    bound = set()
    for alias in node.names:
        if alias.asname is not None:
            bound |= _names_in(alias.asname.name)
        else:
            bound.add(cst.Module([]).code_for_node(alias.name).split(".")[0])
    return bound


def renamable_names(source: str) -> list[str]:
    """User identifiers that a consistent renaming may change, sorted."""
    visitor = _Bindings()
    parse(source).visit(visitor)
    names = visitor.bound - visitor.fixed - RESERVED
    return sorted(n for n in names if not (n.startswith("__") and n.endswith("__")))


class _Rename(cst.CSTTransformer):
    """Rename ``Name`` nodes, except attribute names, keyword names and imports."""

    def __init__(self, mapping: Mapping[str, str]) -> None:
        super().__init__()
        self.mapping = mapping

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.Name:
        new = self.mapping.get(original_node.value)
        return updated_node if new is None else updated_node.with_changes(value=new)

    def leave_Attribute(
        self, original_node: cst.Attribute, updated_node: cst.Attribute
    ) -> cst.Attribute:
        return updated_node.with_changes(attr=original_node.attr)

    def leave_Arg(self, original_node: cst.Arg, updated_node: cst.Arg) -> cst.Arg:
        return updated_node.with_changes(keyword=original_node.keyword)

    def leave_Import(self, original_node: cst.Import, updated_node: cst.Import) -> cst.Import:
        return original_node

    def leave_ImportFrom(
        self, original_node: cst.ImportFrom, updated_node: cst.ImportFrom
    ) -> cst.ImportFrom:
        return original_node


def rename(source: str, mapping: Mapping[str, str]) -> str:
    """Rename the identifiers of ``mapping`` everywhere they are variables."""
    if not mapping:
        return source
    return _checked(parse(source).visit(_Rename(mapping)).code)


# -- import aliases ------------------------------------------------------------------------
#: Submodules that ``import torch.X as Y`` and ``from torch import X as Y`` both bind.
SUBMODULES = {
    "torch.nn",
    "torch.nn.functional",
    "torch.nn.init",
    "torch.optim",
    "torch.autograd",
    "torch.linalg",
    "torch.fft",
}


@dataclass(frozen=True)
class AliasOp:
    """One import rewrite.

    ``kind`` is ``"as"`` (``import M`` / ``from P import N``: bind ``new`` instead of
    ``old``, uses renamed), ``"to_from"`` (``import P.N as N2`` -> ``from P import N as N2``)
    or ``"to_import"`` (the reverse); ``module`` is the dotted module of the import."""

    kind: str
    module: str
    old: str
    new: str = ""


def _dotted(node: cst.BaseExpression) -> str:
    return cst.Module([]).code_for_node(node)


def _as(name: str) -> cst.AsName:
    return cst.AsName(name=cst.Name(name))


def _bound_name(alias: cst.ImportAlias) -> str:
    if alias.asname is not None:
        return _dotted(alias.asname.name)  # type: ignore[arg-type]
    return _dotted(alias.name).split(".")[0]


def _rewrite_import(node: cst.Import, op: AliasOp) -> cst.BaseSmallStatement:
    names = list(node.names)
    for index, alias in enumerate(names):
        dotted = _dotted(alias.name)
        if op.kind == "as" and dotted == op.module and _bound_name(alias) == op.old:
            names[index] = alias.with_changes(asname=None if op.new == dotted else _as(op.new))
        elif op.kind == "to_from" and len(names) == 1 and dotted == op.module:
            if alias.asname is not None and _bound_name(alias) == op.old:
                parent, _, child = dotted.rpartition(".")
                asname = None if child == op.old else alias.asname
                return cst.ImportFrom(
                    module=cst.parse_expression(parent),  # type: ignore[arg-type]
                    names=[cst.ImportAlias(cst.Name(child), asname=asname)],
                )
    return node.with_changes(names=names)


def _rewrite_import_from(node: cst.ImportFrom, op: AliasOp) -> cst.BaseSmallStatement:
    if node.relative or node.module is None or isinstance(node.names, cst.ImportStar):
        return node
    parent = _dotted(node.module)
    names = list(node.names)
    for index, alias in enumerate(names):
        dotted = f"{parent}.{_dotted(alias.name)}"
        if _bound_name(alias) != op.old or dotted != op.module:
            continue
        if op.kind == "as":
            new_as = None if op.new == _dotted(alias.name) else _as(op.new)
            names[index] = alias.with_changes(asname=new_as)
        elif op.kind == "to_import" and len(names) == 1:
            return cst.Import(names=[cst.ImportAlias(cst.parse_expression(dotted), _as(op.old))])  # type: ignore[arg-type]
    if names and isinstance(names[-1].comma, cst.Comma) and node.rpar is None:
        names[-1] = names[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return node.with_changes(names=names)


class _Aliases(cst.CSTTransformer):
    def __init__(self, ops: Sequence[AliasOp]) -> None:
        super().__init__()
        self.ops = ops

    def leave_Import(
        self, original_node: cst.Import, updated_node: cst.Import
    ) -> cst.BaseSmallStatement:
        node: cst.BaseSmallStatement = updated_node
        for op in self.ops:
            if isinstance(node, cst.Import):
                node = _rewrite_import(node, op)
            elif isinstance(node, cst.ImportFrom):
                node = _rewrite_import_from(node, op)
        return node

    def leave_ImportFrom(
        self, original_node: cst.ImportFrom, updated_node: cst.ImportFrom
    ) -> cst.BaseSmallStatement:
        node: cst.BaseSmallStatement = updated_node
        for op in self.ops:
            if isinstance(node, cst.ImportFrom):
                node = _rewrite_import_from(node, op)
            elif isinstance(node, cst.Import):
                node = _rewrite_import(node, op)
        return node


def apply_aliases(source: str, ops: Sequence[AliasOp]) -> str:
    """Rewrite the imports as ``ops`` say and rename the uses of re-bound names."""
    if not ops:
        return source
    module = parse(source).visit(_Aliases(ops))
    renames = {op.old: op.new for op in ops if op.kind == "as" and op.old != op.new}
    if renames:
        module = module.visit(_Rename(renames))
    return _checked(module.code)


@dataclass
class _ImportInfo:
    """Module-level imports of a source: (bound name, dotted module, form) triples."""

    imports: list[tuple[str, str, str]] = field(default_factory=list)  # form: import|from
    single: set[str] = field(default_factory=set)  # bound names of one-name statements


def _imports(module: cst.Module) -> _ImportInfo:
    info = _ImportInfo()
    for statement in module.body:
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        for small in statement.body:
            if isinstance(small, cst.Import):
                for alias in small.names:
                    info.imports.append((_bound_name(alias), _dotted(alias.name), "import"))
                    if len(small.names) == 1 and alias.asname is not None:
                        info.single.add(_bound_name(alias))
            elif isinstance(small, cst.ImportFrom) and not isinstance(small.names, cst.ImportStar):
                if small.relative or small.module is None:
                    continue
                for alias in small.names:
                    dotted = f"{_dotted(small.module)}.{_dotted(alias.name)}"
                    info.imports.append((_bound_name(alias), dotted, "from"))
                    if len(small.names) == 1:
                        info.single.add(_bound_name(alias))
    return info


def alias_candidates(source: str) -> list[AliasOp]:
    """Every import rewrite that keeps ``source``'s meaning, with ``new`` left blank for
    the ``"as"`` ops (the strategy picks a fresh name)."""
    module = parse(source)
    info = _imports(module)
    bindings = _Bindings()
    module.visit(bindings)
    counts: dict[str, int] = {}
    for bound, _, _ in info.imports:
        counts[bound] = counts.get(bound, 0) + 1
    ops = []
    for bound, dotted, form in info.imports:
        if not dotted.startswith("torch") or counts[bound] > 1 or bound in bindings.bound:
            continue
        if form == "import" and "." in dotted and bound == dotted.split(".")[0]:
            continue  # `import torch.nn` binds `torch`: leave it alone
        ops.append(AliasOp("as", dotted, bound))
        if bound in info.single and dotted in SUBMODULES:
            ops.append(AliasOp("to_from" if form == "import" else "to_import", dotted, bound))
    return ops


# -- nesting -------------------------------------------------------------------------------
NEST_KINDS = ("def", "method", "if", "with", "for")


@dataclass(frozen=True)
class Nesting:
    """Wrap statements ``start:stop`` of the ``block``-th statement list (0: the module,
    then every indented block that is not a class body, in source order) in ``kind``.

    ``names`` are fresh identifiers for the wrapper (function, class, loop variable)."""

    kind: str
    block: int
    start: int
    stop: int
    names: tuple[str, str] = ("run_variant", "Variant")


def _is_import(statement: cst.CSTNode) -> bool:
    return isinstance(statement, cst.SimpleStatementLine) and any(
        isinstance(small, (cst.Import, cst.ImportFrom)) for small in statement.body
    )


def _is_docstring(statement: cst.CSTNode) -> bool:
    return (
        isinstance(statement, cst.SimpleStatementLine)
        and len(statement.body) == 1
        and isinstance(statement.body[0], cst.Expr)
        and isinstance(statement.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )


def _first_wrappable(body: Sequence[cst.BaseStatement], is_module: bool) -> int:
    """Index after a leading docstring and, in the module, after the last import: a
    docstring must stay first, and the imports stay at module level."""
    start = 1 if body and _is_docstring(body[0]) else 0
    if is_module:
        for index, statement in enumerate(body):
            if _is_import(statement):
                start = max(start, index + 1)
    return start


def _blocks(module: cst.Module) -> list[cst.Module | cst.IndentedBlock]:
    """The module and every indented block that is not a class body, in source order."""
    blocks: list[cst.Module | cst.IndentedBlock] = [module]
    class_bodies: set[int] = set()

    class _Collect(cst.CSTVisitor):
        def visit_ClassDef(self, node: cst.ClassDef) -> None:
            class_bodies.add(id(node.body))

        def visit_IndentedBlock(self, node: cst.IndentedBlock) -> None:
            if id(node) not in class_bodies:
                blocks.append(node)

    module.visit(_Collect())
    return blocks


def _has(nodes: Sequence[cst.CSTNode], kinds: tuple[type, ...], stop_at: tuple[type, ...]) -> bool:
    """Whether a node of ``kinds`` is inside ``nodes``, not looking into ``stop_at``."""
    found = False

    class _Find(cst.CSTVisitor):
        def on_visit(self, node: cst.CSTNode) -> bool:
            nonlocal found
            if isinstance(node, kinds):
                found = True
            return not found and not isinstance(node, stop_at)

    for node in nodes:
        node.visit(_Find())
    return found


def _breaks_out(source: str, block: int, start: int, stop: int) -> bool:
    """Whether statements ``start:stop`` of the block hold a ``break`` / ``continue`` of
    an enclosing loop."""
    body = list(_blocks(parse(source))[block].body)[start:stop]
    scopes = (cst.For, cst.While, cst.FunctionDef, cst.ClassDef, cst.Lambda)
    return _has(body, (cst.Break, cst.Continue), scopes)


def nest_options(source: str) -> list[tuple[str, int, int, int]]:
    """(kind, block, start, stop) wrappings that keep ``source``'s meaning; the strategy
    may narrow ``if`` / ``with`` / ``for`` to a sub-range of the block.

    - ``def`` / ``method`` only wrap the whole module after its imports, and not when a
      ``global`` statement exists (module names become locals of the wrapper);
    - nothing wraps a docstring or a module-level import (the imports stay at module level,
      where rules look for them); class bodies are not blocks (methods stay methods);
    - ``for`` never takes a ``break`` / ``continue`` away from its own loop (the strategy
      falls back to ``if``).
    """
    module = parse(source)
    options = []
    for index, block in enumerate(_blocks(module)):
        body = list(block.body)
        start = _first_wrappable(body, index == 0)
        if start >= len(body):
            continue
        if index == 0 and not _has(body, (cst.Global,), ()):
            options += [("def", 0, start, len(body)), ("method", 0, start, len(body))]
        for kind in ("if", "with", "for"):
            options.append((kind, index, start, len(body)))
    return options


def _wrapper(nesting: Nesting, body: Sequence[cst.BaseStatement]) -> list[cst.BaseStatement]:
    first = body[0]
    leading = first.leading_lines
    statements = [first.with_changes(leading_lines=()), *body[1:]]
    block = cst.IndentedBlock(body=statements)
    function, klass = nesting.names
    if nesting.kind == "def":
        wrapper: cst.BaseCompoundStatement = cst.FunctionDef(
            name=cst.Name(function), params=cst.Parameters(), body=block
        )
        call = cst.parse_statement(f"{function}()")
        return [wrapper.with_changes(leading_lines=leading), _spaced(call)]
    if nesting.kind == "method":
        method = cst.FunctionDef(
            name=cst.Name(function),
            params=cst.Parameters([cst.Param(cst.Name("self"))]),
            body=block,
        )
        wrapper = cst.ClassDef(name=cst.Name(klass), body=cst.IndentedBlock([method]))
        call = cst.parse_statement(f"{klass}().{function}()")
        return [wrapper.with_changes(leading_lines=leading), _spaced(call)]
    header = {
        "if": "if True:\n    pass\n",
        "with": "with contextlib.nullcontext():\n    pass\n",
        "for": f"for {function} in range(1):\n    pass\n",
    }[nesting.kind]
    wrapper = cst.parse_statement(header)  # type: ignore[assignment]
    return [wrapper.with_changes(body=block, leading_lines=leading)]


def _spaced(statement: cst.BaseStatement) -> cst.BaseStatement:
    return statement.with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine()])


class _Nest(cst.CSTTransformer):
    def __init__(self, nesting: Nesting, target: cst.CSTNode) -> None:
        super().__init__()
        self.nesting = nesting
        self.target = target

    def _wrap(self, body: Sequence[cst.BaseStatement]) -> list[cst.BaseStatement]:
        start, stop = self.nesting.start, self.nesting.stop
        return [*body[:start], *_wrapper(self.nesting, body[start:stop]), *body[stop:]]

    def leave_IndentedBlock(
        self, original_node: cst.IndentedBlock, updated_node: cst.IndentedBlock
    ) -> cst.IndentedBlock:
        if original_node is not self.target:
            return updated_node
        return updated_node.with_changes(body=self._wrap(updated_node.body))

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        body = list(updated_node.body)
        if original_node is self.target:
            body = self._wrap(body)
        if self.nesting.kind == "with":
            at = _first_wrappable(body, True)
            at = at if at < len(body) else len(body)
            body.insert(at, cst.parse_statement("import contextlib"))
        return updated_node.with_changes(body=body)


def nest(source: str, nesting: Nesting) -> str:
    module = parse(source)
    target = _blocks(module)[nesting.block]
    return _checked(module.visit(_Nest(nesting, target)).code)


# -- formatting and comments ---------------------------------------------------------------
class _OutsideFStrings(cst.CSTTransformer):
    """Knows when it is inside an f-string, where a line break is a syntax error before
    Python 3.12: the transforms leave f-strings alone."""

    def __init__(self) -> None:
        super().__init__()
        self.fstring_depth = 0

    def visit_FormattedString(self, node: cst.FormattedString) -> None:
        self.fstring_depth += 1

    def leave_FormattedString(
        self, original_node: cst.FormattedString, updated_node: cst.FormattedString
    ) -> cst.FormattedString:
        self.fstring_depth -= 1
        return updated_node


def _newline_in_parens() -> cst.ParenthesizedWhitespace:
    return cst.ParenthesizedWhitespace(
        first_line=cst.TrailingWhitespace(),
        indent=True,
        last_line=cst.SimpleWhitespace("    "),
    )


def _is_bare_generator(arg: cst.Arg) -> bool:
    return isinstance(arg.value, cst.GeneratorExp) and not arg.value.lpar


class _Reformat(_OutsideFStrings):
    """Whitespace that Python ignores: blank lines, spaces inside brackets, line breaks
    inside calls, trailing commas, spacing around ``=``. Existing comments are kept: only
    plain ``SimpleWhitespace`` is replaced."""

    def __init__(self, rnd: random.Random, rate: float) -> None:
        super().__init__()
        self.rnd = rnd
        self.rate = rate

    def _maybe(self) -> bool:
        return self.fstring_depth == 0 and self.rnd.random() < self.rate

    def on_leave(self, original_node, updated_node):  # type: ignore[no-untyped-def]
        updated_node = super().on_leave(original_node, updated_node)
        if isinstance(updated_node, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            if self._maybe():
                blank = [cst.EmptyLine()] * self.rnd.randint(1, 2)
                updated_node = updated_node.with_changes(
                    leading_lines=[*blank, *updated_node.leading_lines]
                )
        return updated_node

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.Call:
        args = list(updated_node.args)
        if not args:
            return updated_node
        changes: dict[str, object] = {}
        plain_open = isinstance(updated_node.whitespace_before_args, cst.SimpleWhitespace)
        plain_close = isinstance(args[-1].whitespace_after_arg, cst.SimpleWhitespace)
        if self._maybe() and plain_open and plain_close:
            changes["whitespace_before_args"] = cst.SimpleWhitespace(" ")
            args[-1] = args[-1].with_changes(whitespace_after_arg=cst.SimpleWhitespace(" "))
        if self._maybe():  # one argument per line
            if plain_open:
                changes["whitespace_before_args"] = _newline_in_parens()
            for index, arg in enumerate(args[:-1]):
                comma = arg.comma
                if isinstance(comma, cst.Comma) and isinstance(
                    comma.whitespace_after, cst.SimpleWhitespace
                ):
                    comma = comma.with_changes(whitespace_after=_newline_in_parens())
                    args[index] = arg.with_changes(comma=comma)
        if self._maybe() and args[-1].comma is cst.MaybeSentinel.DEFAULT:
            if not (len(args) == 1 and _is_bare_generator(args[0])):
                args[-1] = args[-1].with_changes(comma=cst.Comma())
        return updated_node.with_changes(args=args, **changes)

    def leave_Subscript(
        self, original_node: cst.Subscript, updated_node: cst.Subscript
    ) -> cst.Subscript:
        if not self._maybe():
            return updated_node
        lbracket, rbracket = updated_node.lbracket, updated_node.rbracket
        if isinstance(lbracket.whitespace_after, cst.SimpleWhitespace) and isinstance(
            rbracket.whitespace_before, cst.SimpleWhitespace
        ):
            lbracket = lbracket.with_changes(whitespace_after=cst.SimpleWhitespace(" "))
            rbracket = rbracket.with_changes(whitespace_before=cst.SimpleWhitespace(" "))
        return updated_node.with_changes(lbracket=lbracket, rbracket=rbracket)

    def leave_List(self, original_node: cst.List, updated_node: cst.List) -> cst.List:
        elements = list(updated_node.elements)
        if elements and self._maybe() and elements[-1].comma is cst.MaybeSentinel.DEFAULT:
            elements[-1] = elements[-1].with_changes(comma=cst.Comma())
        return updated_node.with_changes(elements=elements)

    def leave_AssignTarget(
        self, original_node: cst.AssignTarget, updated_node: cst.AssignTarget
    ) -> cst.AssignTarget:
        if not self._maybe():
            return updated_node
        space = cst.SimpleWhitespace(self.rnd.choice(["", "  "]))
        return updated_node.with_changes(
            whitespace_before_equal=space, whitespace_after_equal=space
        )


def reformat(source: str, rnd: random.Random, rate: float = 0.3) -> str:
    return _checked(parse(source).visit(_Reformat(rnd, rate)).code)


#: Comment texts, some of which mention torch on purpose (a comment is never code).
COMMENT_TEXTS = (
    "keep me",
    "w.grad is read here",
    "torch.no_grad() is not needed",
    "x.backward()",
    "TODO check the shapes",
    "\u00e9t\u00e9 \u2014 unicode \u03b1\u03b2",
)


class _Comment(_OutsideFStrings):
    """Comments on their own lines (before statements, after the last statement of a
    block), at line ends (statements and block headers) and inside calls."""

    def __init__(self, rnd: random.Random, rate: float) -> None:
        super().__init__()
        self.rnd = rnd
        self.rate = rate
        self.count = 0

    def _maybe(self) -> bool:
        return self.fstring_depth == 0 and self.rnd.random() < self.rate

    def _comment(self) -> cst.Comment:
        self.count += 1
        return cst.Comment(f"# c{self.count} {self.rnd.choice(COMMENT_TEXTS)}")

    def _trailing(self, trailing: cst.TrailingWhitespace) -> cst.TrailingWhitespace:
        if trailing.comment is not None or not self._maybe():
            return trailing
        return trailing.with_changes(whitespace=cst.SimpleWhitespace("  "), comment=self._comment())

    def on_leave(self, original_node, updated_node):  # type: ignore[no-untyped-def]
        updated_node = super().on_leave(original_node, updated_node)
        if isinstance(updated_node, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            if self._maybe():
                line = cst.EmptyLine(comment=self._comment())
                updated_node = updated_node.with_changes(
                    leading_lines=[*updated_node.leading_lines, line]
                )
        return updated_node

    def leave_SimpleStatementLine(
        self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine
    ) -> cst.SimpleStatementLine:
        return updated_node.with_changes(
            trailing_whitespace=self._trailing(updated_node.trailing_whitespace)
        )

    def leave_IndentedBlock(
        self, original_node: cst.IndentedBlock, updated_node: cst.IndentedBlock
    ) -> cst.IndentedBlock:
        header = self._trailing(updated_node.header)
        footer = list(updated_node.footer)
        if self._maybe():
            footer.insert(0, cst.EmptyLine(comment=self._comment()))
        return updated_node.with_changes(header=header, footer=footer)

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.Call:
        if not updated_node.args or not self._maybe():
            return updated_node
        if not isinstance(updated_node.whitespace_before_args, cst.SimpleWhitespace):
            return updated_node
        inside = cst.ParenthesizedWhitespace(
            first_line=cst.TrailingWhitespace(
                whitespace=cst.SimpleWhitespace("  "), comment=self._comment()
            ),
            indent=True,
            last_line=cst.SimpleWhitespace("    "),
        )
        return updated_node.with_changes(whitespace_before_args=inside)


def add_comments(source: str, rnd: random.Random, rate: float = 0.3) -> str:
    return _checked(parse(source).visit(_Comment(rnd, rate)).code)


def names_outside_imports(source: str) -> set[str]:
    """Names used or bound anywhere but in the module paths of import statements."""
    module = parse(source)
    visitor = _Bindings()
    module.visit(visitor)
    found = visitor.fixed | visitor.bound

    class _Names(cst.CSTVisitor):
        def visit_Import(self, node: cst.Import) -> bool:
            return False

        def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
            return False

        def visit_Name(self, node: cst.Name) -> None:
            found.add(node.value)

    module.visit(_Names())
    return found


def comments(source: str) -> list[str]:
    """The comments of ``source``, in order."""
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return [token.string for token in tokens if token.type == tokenize.COMMENT]


def _checked(source: str) -> str:
    """A transform's output must be valid Python (a broken variant is a test bug)."""
    ast.parse(source)
    return source


# -- strategies ----------------------------------------------------------------------------
_LETTERS = "abcdefghijklmnopqrstuvwxyz"
_GREEK = "\u03b1\u03b2\u03b3\u03b4\u03bb\u03bc\u03c3\u03c9"  # NFKC-stable letters


def fresh_identifiers(taken: set[str]) -> st.SearchStrategy[str]:
    """Valid identifiers not in ``taken``, not reserved; short ones and unicode ones too."""
    first = st.sampled_from(_LETTERS + _GREEK)
    rest = st.text(alphabet=_LETTERS + "0123456789_" + _GREEK[:2], max_size=7)
    names = st.builds(lambda a, b: a + b, first, rest)
    return names.filter(lambda n: n.isidentifier() and n not in taken and n not in RESERVED)


@st.composite
def renamings(draw: st.DrawFn, source: str, taken: set[str]) -> dict[str, str]:
    """A consistent renaming of some of ``source``'s user identifiers to fresh names."""
    names = renamable_names(source)
    if not names:
        return {}
    chosen = draw(st.lists(st.sampled_from(names), min_size=1, unique=True))
    news = draw(
        st.lists(fresh_identifiers(taken), min_size=len(chosen), max_size=len(chosen), unique=True)
    )
    return dict(zip(chosen, news))


@st.composite
def alias_plans(draw: st.DrawFn, source: str, taken: set[str]) -> list[AliasOp]:
    """Some import rewrites of ``source``, with fresh aliases (``th``, ``T``... first)."""
    ops: list[AliasOp] = []
    used = set(taken)
    candidates = alias_candidates(source)
    if not candidates:
        return ops
    for op in draw(st.lists(st.sampled_from(candidates), min_size=1, unique=True)):
        if any(o.old == op.old for o in ops):
            continue  # one rewrite per bound name
        if op.kind == "as":
            preferred = {"torch": ["th", "T", "pt"], "nn": ["tnn", "N"]}.get(op.old, [])
            plain = op.module.rsplit(".", 1)[-1]  # `import torch as th` -> `import torch`
            if plain != op.old and plain not in names_outside_imports(source):
                preferred.append(plain)
            options = [n for n in preferred if n not in used]
            fresh = fresh_identifiers(used)
            name = draw(st.sampled_from(options) | fresh if options else fresh)
            used.add(name)
            op = AliasOp("as", op.module, op.old, name)
        ops.append(op)
    return ops


@dataclass(frozen=True)
class Variant:
    seed: Seed
    source: str
    steps: tuple[str, ...]
    #: nested in a way that changes the blocks the rules reason about: part of a block, or
    #: a block other than the module's, moved into a new block, or code moved into a loop
    #: (that runs once, which a static analysis cannot know)
    reshaped: bool = False

    def __repr__(self) -> str:
        steps = "; ".join(self.steps) or "unchanged"
        return f"Variant of {self.seed.name} ({steps}):\n{self.source}"


ALL_STEPS = ("rename", "alias", "nest", "format", "comment")


@st.composite
def variants(
    draw: st.DrawFn,
    rule: type[Rule],
    steps: Sequence[str] = ALL_STEPS,
) -> Variant:
    """A seed of ``rule`` put through a random selection of the transforms in ``steps``."""
    seed = draw(st.sampled_from(seeds_for(rule)))
    source = seed.source
    taken = identifiers(source)
    done = []
    reshaped = False
    if "rename" in steps and draw(st.booleans()):
        mapping = draw(renamings(source, taken))
        source = rename(source, mapping)
        taken |= set(mapping.values())
        done.append(f"rename {mapping}")
    if "alias" in steps and draw(st.booleans()):
        ops = draw(alias_plans(source, taken))
        source = apply_aliases(source, ops)
        taken |= {op.new for op in ops}
        done.append(f"aliases {ops}")
    if "nest" in steps and draw(st.booleans()):
        options = nest_options(source)
        if options:
            kind, block, start, stop = draw(st.sampled_from(options))
            if kind not in ("def", "method") and draw(st.booleans()):  # a sub-range
                start = draw(st.integers(start, stop - 1))
                stop = draw(st.integers(start + 1, stop))
            names = draw(st.lists(fresh_identifiers(taken), min_size=2, max_size=2, unique=True))
            if kind == "for" and _breaks_out(source, block, start, stop):
                kind = "if"  # a `break` would leave the new loop instead of its own
            nesting = Nesting(kind, block, start, stop, (names[0], names[1].capitalize()))
            source = nest(source, nesting)
            # only the whole module in a function, a method, `if True:` or `with` leaves
            # every block as it was (a loop body wrapped whole is no longer that body)
            module_range = next((o[2:] for o in options if o[1] == 0), None)
            whole_module = block == 0 and (start, stop) == module_range
            reshaped = kind == "for" or not whole_module
            done.append(f"nest {nesting}")
    if "format" in steps and draw(st.booleans()):
        source = reformat(source, draw(st.randoms(use_true_random=True)))
        done.append("format")
    if "comment" in steps and draw(st.booleans()):
        source = add_comments(source, draw(st.randoms(use_true_random=True)))
        done.append("comment")
    return Variant(seed, source, tuple(done), reshaped)
