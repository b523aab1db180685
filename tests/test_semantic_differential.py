"""The `ast` analysis answers as the LibCST one: every query on every matched expression.

For a broad set of sources (every fixture, every VALID/INVALID example of the rules and its
expected fix, the real-world bugs of bench/realworld, tests/data), both trees are built and
their expression nodes matched by kind and range (LibCST's ``PositionProvider`` excludes
parentheses as ``ast`` does; ``ast`` columns are UTF-8 bytes, converted to characters).
``FileAnalysis`` and ``Semantic`` must then give the same answers to each query. A known,
justified difference goes in ``KNOWN`` with its reason.
"""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, PositionProvider

from gradfix.analysis import FileAnalysis
from gradfix.registry import all_rules
from gradfix.semantic import Binding, Semantic
from gradfix.torch_facts import SAVED_WITH_A_NUMBER

ROOT = Path(__file__).resolve().parents[1]

#: LibCST node type -> the `ast` node type it matches.
KINDS: dict[type, type] = {
    cst.Name: ast.Name,
    cst.Attribute: ast.Attribute,
    cst.Call: ast.Call,
    cst.Subscript: ast.Subscript,
    cst.BinaryOperation: ast.BinOp,
    cst.UnaryOperation: ast.UnaryOp,
    cst.IfExp: ast.IfExp,
    cst.Tuple: ast.Tuple,
    cst.List: ast.List,
}
#: `ast` nodes whose range holds their parentheses (LibCST's never does).
_PARENTHESIZED = (ast.Tuple, ast.GeneratorExp)
#: (source label, line, query) -> why the two analyses may differ there.
KNOWN: dict[tuple[str, int, str], str] = {}

Span = tuple[int, int, int, int]


def sources() -> Iterator[tuple[str, str]]:
    for path in sorted(ROOT.glob("fixtures/**/*.py")):
        yield str(path.relative_to(ROOT)), path.read_text(encoding="utf-8")
    for path in sorted(ROOT.glob("bench/realworld/*/bug.py")):
        yield str(path.relative_to(ROOT)), path.read_text(encoding="utf-8")
    for path in sorted(ROOT.glob("tests/data/**/*.py")):
        yield str(path.relative_to(ROOT)), path.read_text(encoding="utf-8")
    for rule in all_rules():
        examples = [*rule.VALID, *rule.INVALID]
        for number, example in enumerate(examples):
            yield f"{rule.__name__}[{number}]", textwrap.dedent(example.code)
            fixed = getattr(example, "expected_fix", None)
            if fixed:
                yield f"{rule.__name__}[{number}] fixed", textwrap.dedent(fixed)


def parse_both(source: str) -> tuple[FileAnalysis, dict, Semantic, ast.Module] | None:
    try:
        wrapper = MetadataWrapper(cst.parse_module(source), unsafe_skip_copy=True)
        tree = ast.parse(source)
    except (SyntaxError, cst.ParserSyntaxError):
        return None
    positions = wrapper.resolve(PositionProvider)
    return FileAnalysis(wrapper.module), positions, Semantic(tree, source), tree


class Spans:
    """Character ranges of `ast` nodes (their columns are UTF-8 byte offsets)."""

    def __init__(self, source: str) -> None:
        self.lines = source.splitlines()

    def column(self, line: int, byte: int) -> int:
        text = self.lines[line - 1] if line - 1 < len(self.lines) else ""
        if text.isascii():
            return byte
        return len(text.encode("utf-8")[:byte].decode("utf-8", errors="replace"))

    def of(self, node: ast.AST) -> Span | None:
        if getattr(node, "end_lineno", None) is None:
            return None
        start = self.column(node.lineno, node.col_offset)  # type: ignore[attr-defined]
        end = self.column(node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined]
        span = (node.lineno, start, node.end_lineno, end)  # type: ignore[attr-defined]
        return self._without_parentheses(span) if type(node) in _PARENTHESIZED else span

    def _without_parentheses(self, span: Span) -> Span:
        """A parenthesized tuple or generator: its `ast` range holds the parentheses."""
        first, start, last, end = span
        opens = self.lines[first - 1][start : start + 1] == "("
        if opens and self.lines[last - 1][end - 1 : end] == ")":
            return (first, start + 1, last, end - 1)
        return span


def cst_span(positions: Any, node: cst.CSTNode | None) -> Span | None:
    if node is None or node not in positions:
        return None
    where = positions[node]
    return (where.start.line, where.start.column, where.end.line, where.end.column)


def matched_nodes(
    positions: Any, tree: ast.Module, spans: Spans
) -> list[tuple[cst.CSTNode, ast.AST]]:
    by_key: dict[tuple[type, Span], ast.AST] = {}
    for node in ast.walk(tree):
        span = spans.of(node) if type(node) in KINDS.values() else None
        if span is not None:
            by_key[(type(node), span)] = node
    pairs = []
    for node, where in positions.items():
        kind = KINDS.get(type(node))
        span = (where.start.line, where.start.column, where.end.line, where.end.column)
        found = by_key.get((kind, span)) if kind is not None else None  # type: ignore[arg-type]
        if found is not None:
            pairs.append((node, found))
    return pairs


class Comparison:
    """The answers of both analyses for one source, turned into comparable values."""

    def __init__(self, label: str, source: str) -> None:
        parsed = parse_both(source)
        assert parsed is not None
        self.label = label
        self.old, self.positions, self.new, self.tree = parsed
        self.spans = Spans(source)
        self.queries = 0
        self.differences: list[str] = []

    def old_span(self, node: Any) -> Span | None:
        return cst_span(self.positions, node)

    def new_span(self, node: Any) -> Span | None:
        return self.spans.of(node) if node is not None else None

    def compare(self, line: int, query: str, old: Callable[[], Any], new: Callable[[], Any]):
        self.queries += 1
        before, after = old(), new()
        if before != after and (self.label, line, query) not in KNOWN:
            self.differences.append(f"{self.label}:{line} {query}: {before!r} != {after!r}")

    def run(self) -> int:
        pairs = matched_nodes(self.positions, self.tree, self.spans)
        for old, new in pairs:
            self.compare_node(old, new)
            self.compare_flow(old, new)
        self.compare_file()
        self.compare_parameters()
        return len(pairs)

    def compare_file(self) -> None:
        a, b = self.old, self.new
        self.compare(0, "imports_torch", a.imports_torch, b.imports_torch)
        self.compare(0, "torch_alias", a.torch_alias, b.torch_alias)
        for module in ("torch.nn", "torch.nn.functional", "torch"):
            query = f"module_alias({module})"
            old, new = a.module_alias(module), b.module_alias(module)
            self.compare(0, query, lambda: old, lambda: new)  # noqa: B023 (called at once)

    def compare_parameters(self) -> None:
        """``passed_arguments`` of every parameter (matched by the position of its name)."""
        params = {}
        for node in self.positions:
            if isinstance(node, cst.Param):
                name = self.positions[node.name]
                params[(name.start.line, name.start.column)] = node
        for arg in ast.walk(self.tree):
            if not isinstance(arg, ast.arg):
                continue
            old = params.get((arg.lineno, self.spans.column(arg.lineno, arg.col_offset)))
            if old is None:
                continue
            before = self._pairs(self.old.passed_arguments(old), self.old_span)
            after = self._pairs(self.new.passed_arguments(arg), self.new_span)
            self.compare(arg.lineno, "passed_arguments", lambda: before, lambda: after)  # noqa: B023

    def compare_flow(self, old: Any, new: Any) -> None:
        """Values through functions, lists, parameters; operands saved for backward."""
        a, b = self.old, self.new
        line = new.lineno
        check = self.compare
        check(
            line,
            "saved_operands",
            lambda: self._old_saved_tensors(a.saved_operands(old), new),
            lambda: self._spans(b.saved_operands(new), self.new_span),
        )
        check(
            line,
            "parameter_iterable",
            lambda: a.parameter_iterable(old),
            lambda: b.parameter_iterable(new),
        )
        if isinstance(new, ast.Call):
            check(
                line,
                "leaf_value_reason",
                lambda: _description(a.leaf_value_reason(old, old)),
                lambda: _description(b.leaf_value_reason(new, new)),
            )
            check(
                line,
                "returned_values",
                lambda: self._pairs(a.returned_values(old, old), self.old_span),
                lambda: self._pairs(b.returned_values(new, new), self.new_span),
            )
            check(
                line,
                "local_function",
                lambda: self._definition(a.local_function(old.func, old), old=True),
                lambda: self._definition(b.local_function(new.func, new), old=False),
            )
        if isinstance(new, ast.Name):
            check(
                line,
                "list_elements",
                lambda: self._elements(a.list_elements(old, old), self.old_span),
                lambda: self._elements(b.list_elements(new, new), self.new_span),
            )

    def _old_saved_tensors(self, nodes: Any, new: ast.AST) -> Any:
        """The old ``saved_operands`` as the generated facts put it (issue 12): without
        Python numbers (no tensor of them is saved) and, for an op whose number operand
        selects another overload (``2 / x``, ``x ** 2``: ``SAVED_WITH_A_NUMBER``), the new
        answer, which ``test_semantic.py`` checks against torch instead."""
        b = self.new
        op = b.tensor_op(new)
        if nodes is None or op is None:
            return self._spans(nodes, self.old_span)
        name, operands = op
        numbers = [o for o in operands if b.element_shape(o, new) == "number"]
        labels = [label for label, o in zip(("self", "other"), operands) if o in numbers]
        if any((name, label) in SAVED_WITH_A_NUMBER for label in labels):
            return self._spans(b.saved_operands(new), self.new_span)
        skipped = {self.new_span(o) for o in numbers}
        return [s for s in self._spans(nodes, self.old_span) if s not in skipped]

    def _spans(self, nodes: Any, span: Callable[[Any], Span | None]) -> Any:
        return None if nodes is None else [span(n) for n in nodes]

    def _pairs(self, pairs: Any, span: Callable[[Any], Span | None]) -> Any:
        """The values of ``(value, where)`` pairs (``where`` is a statement: no range)."""
        return None if pairs is None else [span(value) for value, _ in pairs]

    def _elements(self, found: Any, span: Callable[[Any], Span | None]) -> Any:
        return None if found is None else (self._pairs(found[0], span), found[1])

    def compare_node(self, old: Any, new: Any) -> None:
        a, b = self.old, self.new
        line = new.lineno
        check = self.compare
        if isinstance(new, (ast.Name, ast.Attribute)):
            check(
                line, "qualified_name", lambda: a.qualified_name(old), lambda: b.qualified_name(new)
            )
        check(line, "is_tensor", lambda: a.is_tensor(old), lambda: b.is_tensor(new))
        check(line, "requires_grad", lambda: a.requires_grad(old), lambda: b.requires_grad(new))
        check(
            line,
            "leaf_reason",
            lambda: _description(a.leaf_reason(old)),
            lambda: _description(b.leaf_reason(new)),
        )
        check(line, "in_no_grad", lambda: a.in_no_grad(old), lambda: b.in_no_grad(new))
        check(line, "saves_output", lambda: a.saves_output(old), lambda: b.saves_output(new))
        check(
            line,
            "tensor_op",
            lambda: self._op(a.tensor_op(old), self.old_span),
            lambda: self._op(b.tensor_op(new), self.new_span),
        )
        check(line, "element_shape", lambda: a.element_shape(old), lambda: b.element_shape(new))
        if isinstance(new, (ast.Name, ast.Attribute, ast.Call)):
            check(line, "is_module", lambda: a.is_module(old, old), lambda: b.is_module(new, new))
            check(
                line,
                "is_nn_layer",
                lambda: a.is_nn_layer(old, old),
                lambda: b.is_nn_layer(new, new),
            )
        check(
            line,
            "enclosing_function",
            lambda: self._definition(a.enclosing_function(old), old=True),
            lambda: self._definition(b.enclosing_function(new), old=False),
        )
        check(
            line,
            "enclosing_class",
            lambda: self._definition(a.enclosing_class(old), old=True),
            lambda: self._definition(b.enclosing_class(new), old=False),
        )
        if isinstance(new, ast.Name):
            check(
                line,
                "reaching_binding",
                lambda: self._binding(a.reaching_binding(old), self.old_span),
                lambda: self._binding(b.reaching_binding(new), self.new_span),
            )

    def _op(self, op: Any, span: Callable[[Any], Span | None]) -> Any:
        return None if op is None else (op[0], [span(o) for o in op[1]])

    def _definition(self, node: Any, old: bool) -> tuple[str, int] | None:
        if node is None:
            return None
        if old:
            where = self.old_span(node.name)
            return node.name.value, where[0] if where else -1
        return node.name, node.lineno

    def _binding(self, binding: Binding | Any, span: Callable[[Any], Span | None]) -> Any:
        if binding is None:
            return None
        annotation = span(binding.annotation)
        return (binding.kind, binding.name, span(binding.value), binding.unpack_index, annotation)


def _description(reason: Any) -> str | None:
    return None if reason is None else reason.description


def test_semantic_answers_as_file_analysis() -> None:
    compared = queries = files = 0
    differences: list[str] = []
    for label, source in sources():
        if parse_both(source) is None:
            continue
        comparison = Comparison(label, source)
        compared += comparison.run()
        queries += comparison.queries
        differences += comparison.differences
        files += 1
    print(f"\n{files} sources, {compared} matched expressions, {queries} queries compared")
    assert files > 300 and compared > 20_000
    assert not differences, "\n".join(differences[:40]) + f"\n({len(differences)} in all)"


@pytest.mark.parametrize(
    "source",
    [
        "x = 'é' + torch.exp(w)\n",
        "import torch\nw = torch.ones(2, requires_grad=True)\ny = ('ü', w.exp())\n",
    ],
)
def test_spans_convert_byte_columns_to_characters(source: str) -> None:
    comparison = Comparison("unicode", source)
    calls = [n for n, m in matched_nodes(comparison.positions, comparison.tree, comparison.spans)]
    assert any(isinstance(n, cst.Call) for n in calls)
    comparison.run()
    assert not comparison.differences
