"""Building fixes: from the ``ast`` nodes a rule decided on to LibCST edits.

Rules decide on Python's ``ast`` (:class:`gradfix.rule.Rule`); a finding that has a fix
carries a :class:`FixPlan`: what the fix does (description, safety) and a function that
builds its edits. Only when a file has such a finding does the engine parse it with
LibCST and hand each plan an :class:`Editor`, which finds the LibCST node of each ``ast``
node by position and offers the shared vocabulary of edits (ruff's ``fix/edits.rs``)::

    def build(editor: Editor) -> list[Edit]:
        call = editor.node(call_ast)                      # the cst.Call at that range
        return [editor.add_argument(call, "requires_grad", "True")]

    self.report(call_ast, fix=self.plan(build, "Add `requires_grad=True`"))

The vocabulary: :meth:`Editor.replace`, :meth:`Editor.add_argument`,
:meth:`Editor.remove_argument`, :meth:`Editor.replace_argument`,
:meth:`Editor.wrap_in_no_grad` (a run of statements in one ``with torch.no_grad():``),
:meth:`Editor.replace_nodes` (rebuild a statement with some of its nodes replaced),
:meth:`Editor.torch_attr` (``torch.x.y`` spelled with the file's alias) and the imports a
fix needs (``FixPlan.imports``, added by the engine).
"""

from __future__ import annotations

import ast
import bisect
import functools
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

import libcst as cst

from gradfix.fileio.text import source_lines
from gradfix.lazy import lazy_class
from gradfix.rule import Edit, Fix, FixPlan, Replacement, keeping_comments
from gradfix.walk import children

if TYPE_CHECKING:
    from libcst.metadata import CodeRange


@functools.cache
def _cst_types() -> dict[type[ast.AST], tuple[type[cst.CSTNode], ...]]:
    """``ast`` node type -> the LibCST node types at the same range (parentheses excluded)."""
    types: dict[type[ast.AST], tuple[type[cst.CSTNode], ...]] = {
        ast.Name: (cst.Name,),
        ast.Attribute: (cst.Attribute,),
        ast.Call: (cst.Call,),
        ast.Subscript: (cst.Subscript,),
        ast.BinOp: (cst.BinaryOperation,),
        ast.UnaryOp: (cst.UnaryOperation,),
        ast.BoolOp: (cst.BooleanOperation,),
        ast.Compare: (cst.Comparison,),
        ast.Constant: (
            cst.Integer,
            cst.Float,
            cst.Imaginary,
            cst.SimpleString,
            cst.ConcatenatedString,
            cst.Name,
            cst.Ellipsis,
        ),
        ast.JoinedStr: (cst.FormattedString, cst.ConcatenatedString),
        ast.Tuple: (cst.Tuple,),
        ast.List: (cst.List,),
        ast.Dict: (cst.Dict,),
        ast.Set: (cst.Set,),
        ast.ListComp: (cst.ListComp,),
        ast.SetComp: (cst.SetComp,),
        ast.DictComp: (cst.DictComp,),
        ast.GeneratorExp: (cst.GeneratorExp,),
        ast.Lambda: (cst.Lambda,),
        ast.IfExp: (cst.IfExp,),
        ast.NamedExpr: (cst.NamedExpr,),
        ast.Starred: (cst.StarredElement, cst.Arg),
        ast.Slice: (cst.Slice,),
        ast.Await: (cst.Await,),
        ast.Yield: (cst.Yield,),
        ast.keyword: (cst.Arg,),
        ast.Expr: (cst.Expr,),
        ast.Assign: (cst.Assign,),
        ast.AugAssign: (cst.AugAssign,),
        ast.AnnAssign: (cst.AnnAssign,),
        ast.Return: (cst.Return,),
        ast.Delete: (cst.Del,),
        ast.Pass: (cst.Pass,),
        ast.Break: (cst.Break,),
        ast.Continue: (cst.Continue,),
        ast.Raise: (cst.Raise,),
        ast.Assert: (cst.Assert,),
        ast.Import: (cst.Import,),
        ast.ImportFrom: (cst.ImportFrom,),
        ast.Global: (cst.Global,),
        ast.Nonlocal: (cst.Nonlocal,),
        ast.For: (cst.For,),
        ast.AsyncFor: (cst.For,),
        ast.While: (cst.While,),
        ast.If: (cst.If,),
        ast.With: (cst.With,),
        ast.AsyncWith: (cst.With,),
        ast.Try: (cst.Try,),
        ast.FunctionDef: (cst.FunctionDef,),
        ast.AsyncFunctionDef: (cst.FunctionDef,),
        ast.ClassDef: (cst.ClassDef,),
        ast.Module: (cst.Module,),
    }
    if hasattr(ast, "TryStar"):
        types[ast.TryStar] = (cst.TryStar,)
    return types


Span = tuple[int, int, int, int]


def ast_range(node: ast.AST, lines: Sequence[str]) -> CodeRange:
    """The range of ``node`` as LibCST's ``PositionProvider`` gives it: 1-based lines,
    0-based columns counted in characters (``ast`` counts UTF-8 bytes)."""
    line, end_line = node.lineno, node.end_lineno  # type: ignore[attr-defined]
    col = _chars(lines, line, node.col_offset)  # type: ignore[attr-defined]
    end_col = _chars(lines, end_line, node.end_col_offset)  # type: ignore[attr-defined]
    from libcst.metadata import CodePosition, CodeRange

    return CodeRange(CodePosition(line, col), CodePosition(end_line or line, end_col))


def _chars(lines: Sequence[str], line: int | None, offset: int | None) -> int:
    if line is None or offset is None:
        return 0
    text = lines[line - 1] if 0 < line <= len(lines) else ""
    if text.isascii():
        return offset
    return len(text.encode("utf-8")[:offset].decode("utf-8", errors="replace"))


class Editor:
    """The LibCST side of fixing one file: nodes by ``ast`` position, and the edits."""

    def __init__(self, module: cst.Module, source: str, torch_alias: str | None) -> None:
        self.module = module
        self.lines = source_lines(source)
        self.alias = torch_alias
        self._positions: Mapping[cst.CSTNode, CodeRange] | None = None
        self._index: dict[Span, list[cst.CSTNode]] | None = None
        self._parents: dict[int, cst.CSTNode] | None = None
        self._statements = _TopLevelStatements(module, source)

    # -- finding nodes -----------------------------------------------------------------
    @property
    def positions(self) -> Mapping[cst.CSTNode, CodeRange]:
        """Every node's range: the ranges resolved for the statements where fixes were
        built, the whole module's only when asked for another node."""
        return _Positions(self._statements, self._all_positions)

    def _all_positions(self) -> Mapping[cst.CSTNode, CodeRange]:
        if self._positions is None:
            self._positions = _resolve_positions(self.module)
        return self._positions

    def node(self, node: ast.AST) -> cst.CSTNode:
        """The LibCST node for ``node`` (same range, corresponding type); LookupError if
        there is none (the plan then offers no fix)."""
        if isinstance(node, ast.Module):
            return self.module
        where = ast_range(node, self.lines)
        span = (where.start.line, where.start.column, where.end.line, where.end.column)
        index = self._statements.index_at(where.start.line)
        if index is None:  # no top-level statement holds the line alone: the whole module
            index = self._whole_index()
        wanted = _cst_types().get(type(node), ())
        for candidate in index.get(span, ()):
            if isinstance(candidate, wanted):
                return candidate
        raise LookupError(f"no LibCST node for {type(node).__name__} at {span}")

    def _whole_index(self) -> dict[Span, list[cst.CSTNode]]:
        if self._index is None:
            self._index = _span_index(self._all_positions())
        return self._index

    def statement(self, node: ast.stmt) -> cst.BaseStatement:
        """The statement of the block holding ``node``: its ``SimpleStatementLine`` for a
        simple statement (``x = 1``), the compound statement itself (``for``, ``with``)."""
        found = self.node(node)
        if isinstance(found, cst.BaseStatement):
            return found
        parent = self.parent(found)
        if not isinstance(parent, cst.BaseStatement):
            raise LookupError(f"{type(found).__name__} is not in a statement line")
        return parent

    def parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        if self._parents is None:
            parents: dict[int, cst.CSTNode] = {}
            stack: list[cst.CSTNode] = [self.module]
            while stack:
                current = stack.pop()
                for child in children(current):
                    parents[id(child)] = current
                    stack.append(child)
            self._parents = parents
        return self._parents.get(id(node))

    def code(self, node: cst.CSTNode) -> str:
        return self.module.code_for_node(node)

    # -- the vocabulary ------------------------------------------------------------------
    def torch_attr(self, dotted: str) -> cst.BaseExpression:
        """``torch.<dotted>`` spelled with the file's alias for torch (``th.no_grad``)."""
        expr: cst.BaseExpression = cst.Name(self.alias or "torch")
        for part in dotted.split("."):
            expr = cst.Attribute(expr, cst.Name(part))
        return expr

    @property
    def torch_imports(self) -> tuple[str, ...]:
        """The imports a fix that spells ``torch.x`` needs: ``("torch",)`` without one."""
        return () if self.alias else ("torch",)

    def replace(self, target: cst.CSTNode, replacement: Replacement) -> Edit:
        return Edit(target, replacement)

    def add_argument(self, call: cst.Call, keyword: str, value: cst.BaseExpression | str) -> Edit:
        """``f(a)`` -> ``f(a, keyword=value)``, the last comma's layout kept."""
        return Edit(call, with_argument(call, keyword, value))

    def remove_argument(self, call: cst.Call, keyword: str) -> Edit:
        """``f(a, keyword=v, b=1)`` -> ``f(a, b=1)``."""
        return Edit(call, without_argument(call, keyword))

    def replace_argument(
        self, call: cst.Call, keyword: str, value: cst.BaseExpression | str
    ) -> Edit:
        """``f(keyword=old)`` -> ``f(keyword=value)`` (added when absent)."""
        return Edit(call, with_argument(call, keyword, value))

    def replace_nodes(
        self, node: cst.CSTNode, replacements: Mapping[cst.CSTNode, cst.CSTNode]
    ) -> cst.CSTNode:
        """``node`` rebuilt with each key of ``replacements`` (nodes inside it) replaced."""
        if not replacements:
            return node
        by_id = {id(old): new for old, new in replacements.items()}
        rebuilt = node.visit(_NodeReplacer(by_id))
        assert isinstance(rebuilt, cst.CSTNode)  # replacements are nodes, never removals
        return rebuilt

    def wrap_in_no_grad(
        self,
        statements: Sequence[cst.BaseStatement],
        replacements: Mapping[cst.CSTNode, cst.CSTNode] | None = None,
    ) -> list[Edit]:
        """Consecutive ``statements`` of one block in a single ``with torch.no_grad():``,
        with ``replacements`` applied inside; the first statement's leading comments stay
        above the block."""
        rewritten = [self.replace_nodes(s, replacements or {}) for s in statements]
        first = rewritten[0]
        assert isinstance(first, (cst.SimpleStatementLine, cst.BaseCompoundStatement))
        inner = [first.with_changes(leading_lines=()), *rewritten[1:]]
        block = cst.With(
            items=[cst.WithItem(cst.Call(self.torch_attr("no_grad")))],
            body=cst.IndentedBlock(body=inner),  # type: ignore[arg-type]
            leading_lines=first.leading_lines,
        )
        edits = [Edit(statements[0], block)]
        edits += [Edit(stmt, cst.RemovalSentinel.REMOVE) for stmt in statements[1:]]
        return edits

    # -- plans ---------------------------------------------------------------------------
    def realise(self, plan: FixPlan) -> Fix | None:
        """The fix ``plan`` describes, or None when it cannot be built here (a node it
        needs has no LibCST counterpart, or the fix would delete a comment)."""
        try:
            edits = plan.build(self)
        except LookupError:
            return None
        if not edits:
            return None
        fix = Fix(tuple(edits), plan.safety, plan.description, plan.imports, plan.joinable)
        return keeping_comments(fix)


def _argument_value(value: cst.BaseExpression | str) -> cst.BaseExpression:
    return cst.parse_expression(value) if isinstance(value, str) else value


def with_argument(call: cst.Call, keyword: str, value: cst.BaseExpression | str) -> cst.Call:
    """``call`` with ``keyword=value`` set: replaced in place when present, else appended
    after the last argument (keeping a trailing comma and the closing layout)."""
    expr = _argument_value(value)
    args = list(call.args)
    for index, arg in enumerate(args):
        if arg.keyword is not None and arg.keyword.value == keyword:
            args[index] = arg.with_changes(value=expr)
            return call.with_changes(args=args)
    new = cst.Arg(
        value=expr,
        keyword=cst.Name(keyword),
        equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")),
    )
    if not args:
        return call.with_changes(args=[new])
    last = args[-1]
    if isinstance(last.comma, cst.Comma):
        # A trailing comma: the old last argument takes the separator used between the
        # arguments, and the new one the trailing comma (with the line break before ``)``).
        between = args[-2].comma if len(args) > 1 else cst.MaybeSentinel.DEFAULT
        if not isinstance(between, cst.Comma):
            between = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        commented = _commented_line_break(last.comma)
        if commented is not None and isinstance(
            between.whitespace_after, cst.ParenthesizedWhitespace
        ):
            # ``b,  # why``: the comment stays after ``b``, the new argument gets a line
            next_line = between.whitespace_after
            kept = last.comma.with_changes(
                whitespace_after=commented.with_changes(
                    empty_lines=next_line.empty_lines,
                    indent=next_line.indent,
                    last_line=next_line.last_line,
                )
            )
            closing = cst.Comma(
                whitespace_after=commented.with_changes(first_line=cst.TrailingWhitespace())
            )
            args[-1] = last.with_changes(comma=kept)
            return call.with_changes(args=[*args, new.with_changes(comma=closing)])
        args[-1] = last.with_changes(comma=between)
        return call.with_changes(args=[*args, new.with_changes(comma=last.comma)])
    args[-1] = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    return call.with_changes(args=[*args, new])


def attribute_owner(editor: Editor, attribute: cst.CSTNode) -> cst.BaseExpression:
    """``(w.data)`` -> ``(w)``: the attribute's owner, keeping its parentheses."""
    assert isinstance(attribute, cst.Attribute)
    return attribute.value.with_changes(lpar=attribute.lpar, rpar=attribute.rpar)


def method_receiver(editor: Editor, call: cst.CSTNode) -> cst.BaseExpression:
    """``(x.detach())`` -> ``(x)``: the receiver of an argument-less method call, keeping
    the call's parentheses."""
    assert isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute)
    return call.func.value.with_changes(lpar=call.lpar, rpar=call.rpar)


def without_argument(call: cst.Call, keyword: str) -> cst.Call:
    """``call`` without its ``keyword=`` argument; the comma before the closing
    parenthesis follows the original (no dangling ``, )``)."""
    args = list(call.args)
    kept = [a for a in args if a.keyword is None or a.keyword.value != keyword]
    if len(kept) == len(args):
        return call
    if kept and args[-1] not in kept:
        kept[-1] = kept[-1].with_changes(comma=_closing_comma(kept[-1].comma, args[-1].comma))
    return call.with_changes(args=kept)


def _commented_line_break(
    comma: cst.Comma | cst.MaybeSentinel,
) -> cst.ParenthesizedWhitespace | None:
    """The line break after ``comma`` when a comment ends its line (``a,  # why``)."""
    after = comma.whitespace_after if isinstance(comma, cst.Comma) else None
    if isinstance(after, cst.ParenthesizedWhitespace) and after.first_line.comment is not None:
        return after
    return None


def _closing_comma(
    own: cst.Comma | cst.MaybeSentinel, removed: cst.Comma | cst.MaybeSentinel
) -> cst.Comma | cst.MaybeSentinel:
    """The comma of the new last argument: the removed last argument's, unless its own
    carries a comment (``a,  # why``), which stays, with the removed comma's line end
    before ``)`` when there is one (a trailing comma is valid)."""
    after = _commented_line_break(own)
    if after is None:
        return removed
    assert isinstance(own, cst.Comma)
    closing = removed.whitespace_after if isinstance(removed, cst.Comma) else None
    if isinstance(closing, cst.ParenthesizedWhitespace):
        after = after.with_changes(
            empty_lines=closing.empty_lines, indent=closing.indent, last_line=closing.last_line
        )
    return own.with_changes(whitespace_after=after)


@lazy_class
def _NodeReplacer() -> type:
    class NodeReplacer(cst.CSTTransformer):
        def __init__(self, replacements: dict[int, cst.CSTNode]) -> None:
            super().__init__()
            self.replacements = replacements

        def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode):  # type: ignore[no-untyped-def]
            return self.replacements.get(id(original_node), updated_node)

    return NodeReplacer


def as_receiver(expr: cst.BaseExpression) -> cst.BaseExpression:
    """``expr`` ready to take ``.method()`` or ``[index]``: parenthesised unless it is an
    atom (a name, attribute, call or subscript) or already in parentheses."""
    if isinstance(expr, (cst.Name, cst.Attribute, cst.Subscript, cst.Call)) or expr.lpar:
        return expr
    return expr.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])


def cst_argument(call: cst.Call, keyword: str, position: int | None) -> cst.Arg | None:
    """The LibCST argument passed as ``keyword=`` or at ``position`` (positional only):
    the fix-side twin of :func:`gradfix.semantic.syntax.argument`."""
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == keyword:
            return arg
    if position is not None:
        positional = [a for a in call.args if a.keyword is None and not a.star]
        if len(positional) > position:
            return positional[position]
    return None


def as_keyword(arg: cst.Arg, keyword: str) -> cst.Arg:
    """``arg`` passed as ``keyword=`` (no spaces around ``=``), its value and comma kept."""
    equal = cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace(""))
    return arg.with_changes(keyword=cst.Name(keyword), equal=equal)


def _resolve_positions(module: cst.Module) -> Mapping[cst.CSTNode, CodeRange]:
    from libcst.metadata import MetadataWrapper, PositionProvider

    return MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)


def _span_index(positions: Mapping[cst.CSTNode, CodeRange]) -> dict[Span, list[cst.CSTNode]]:
    index: dict[Span, list[cst.CSTNode]] = {}
    for cst_node, where in positions.items():
        span = (where.start.line, where.start.column, where.end.line, where.end.column)
        index.setdefault(span, []).append(cst_node)
    return index


class _TopLevelStatements:
    """The ranges of a module's nodes, resolved one top-level statement at a time.

    LibCST's ``PositionProvider`` over a whole module costs about twice its parse; a fix
    needs the nodes of one statement. A top-level statement starts a line at column 0, so
    its nodes' ranges within a module of that statement alone are the same, shifted by
    the lines before it (its text, from ``code_for_node``, follows the header and the
    statements before it; when the texts do not add up to the module's code, nothing is
    resolved this way)."""

    def __init__(self, module: cst.Module, source: str) -> None:
        self.module = module
        self.source = source  # what ``module`` was parsed from: its code
        self._first_lines: list[int] | None = None  # of each statement's text, 1-based
        self._resolved: dict[int, dict[Span, list[cst.CSTNode]]] = {}  # statement -> index
        self.ranges: dict[cst.CSTNode, CodeRange] = {}  # every node of those statements

    def index_at(self, line: int) -> dict[Span, list[cst.CSTNode]] | None:
        """Spans -> nodes of the statement whose text holds ``line`` (None: unknown)."""
        first_lines = self._statement_lines()
        position = bisect.bisect_right(first_lines, line) - 1
        if not 0 <= position < len(self.module.body):
            return None
        if position not in self._resolved:
            self._resolved[position] = self._resolve(position, first_lines[position] - 1)
        return self._resolved[position]

    def _statement_lines(self) -> list[int]:
        if self._first_lines is None:
            self._first_lines = _first_lines(self.module, self.source)
        return self._first_lines

    def _resolve(self, position: int, shift: int) -> dict[Span, list[cst.CSTNode]]:
        from libcst.metadata import CodePosition, CodeRange

        module = self.module
        alone = module.with_changes(body=[module.body[position]], header=[], footer=[])
        shifted = {
            node: CodeRange(
                CodePosition(where.start.line + shift, where.start.column),
                CodePosition(where.end.line + shift, where.end.column),
            )
            for node, where in _resolve_positions(alone).items()
            if node is not alone
        }
        self.ranges.update(shifted)
        return _span_index(shifted)


def _first_lines(module: cst.Module, code: str) -> list[int]:
    """The first line of each top-level statement's text (its comments and blank lines
    before it included); empty when the pieces do not give ``code`` (the source the
    module was parsed from: LibCST's code of the whole module would cost one more
    generation of every statement), or when it has ``\\r`` line ends (LibCST counts a
    ``\\r`` and a ``\\n`` of two tokens as two lines: only ``\\n`` alone is counted here)."""
    if "\r" in code:
        return []
    header = "".join(module.code_for_node(line) for line in module.header)
    texts = [module.code_for_node(statement) for statement in module.body]
    footer = "".join(module.code_for_node(line) for line in module.footer)
    whole = header + "".join(texts) + footer
    if code != whole and not (whole.endswith("\n") and code == whole[:-1]):
        return []
    first_lines, line = [], 1 + header.count("\n")
    for text in texts:
        first_lines.append(line)
        line += text.count("\n")
    return first_lines


class _Positions(Mapping["cst.CSTNode", "CodeRange"]):
    """Ranges by node: those of the resolved statements, else the whole module's."""

    def __init__(
        self,
        statements: _TopLevelStatements,
        whole: Callable[[], Mapping[cst.CSTNode, CodeRange]],
    ) -> None:
        self.statements = statements
        self.whole = whole

    def __getitem__(self, node: cst.CSTNode) -> CodeRange:
        found = self.statements.ranges.get(node)
        return found if found is not None else self.whole()[node]

    def __iter__(self) -> Iterator[cst.CSTNode]:
        return iter(self.whole())

    def __len__(self) -> int:
        return len(self.whole())
