"""Masked unsafe branches (GF301, GF302): which functions are unsafe where, and the guard.

`torch.where(c, a, b)` and `mask * a + (1 - mask) * b` differentiate *both* branches and
multiply the unselected one's gradient by 0. A branch whose value or derivative is
infinite or nan at a masked-out position (`sqrt` at 0 or below, `log` at 0, `1 / x` at 0,
`acos` at ±1...) therefore poisons the gradient there: `0 * inf = nan`.

This module answers three questions for both rules:

- **Which calls are unsafe, and where?** :func:`unsafe_uses` lists the unsafe calls in an
  expression (`torch.sqrt(x)`, `x.sqrt()`, `x ** 0.5`, `torch.pow(x, -1)`, `a / x`,
  `torch.log(x)`, `torch.acos(x)`...), each with the input to guard and the set of input
  values where the function is singular (:class:`UnsafeFunction`).
- **Does the mask discard singular inputs?** :func:`parse_condition` reads a condition
  (`d > 0`, `(x < 0.003).float()`, `c.abs() > 1e-6`, `~m`, `a & b`, a name bound to one
  of these) and :func:`discards_singular_inputs` decides whether a position the mask
  discards can hold a singular input. This is the *precision rule*: a finding needs the
  condition to test the unsafe function's own input (the same expression with the same
  bindings, possibly through `abs()` or negation), and the region it discards must meet
  the singular set (literal bounds are checked exactly; a bound that is not a literal is
  assumed to sit at the singular point). A mask about something else (padding,
  attention, labels) proves nothing about the input and is not reported.
- **What is the fix?** (decided on `ast`, built with LibCST by the rules' fix builders)
  :func:`guard` builds the "double where": the unsafe input is
  replaced by `torch.where(cond, x, torch.ones_like(x))` so that the discarded positions
  see a harmless value (1 for sqrt/log/reciprocal/pow, 0 for acos/asin/atanh) and the
  kept positions are untouched: forward values do not change.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TypeGuard, Union

import libcst as cst

from gradfix.edits import Editor
from gradfix.semantic import Semantic
from gradfix.semantic.syntax import argument, argument_values, normalized_code, source_children

INF = math.inf


@dataclass(frozen=True)
class Interval:
    """A real interval; the ends are included when ``closed_*``."""

    low: float
    high: float
    closed_low: bool = True
    closed_high: bool = True

    def __contains__(self, value: float) -> bool:
        above = value > self.low or (self.closed_low and value == self.low)
        below = value < self.high or (self.closed_high and value == self.high)
        return above and below


@dataclass(frozen=True)
class UnsafeFunction:
    """A function whose value or derivative is infinite or nan on ``singular`` inputs."""

    name: str
    singular: tuple[Interval, ...]
    safe_value: int  # an input where the function and its derivative are finite

    def is_singular(self, value: float) -> bool:
        return any(value in interval for interval in self.singular)

    def endpoints(self) -> list[float]:
        ends = [e for i in self.singular for e in (i.low, i.high)]
        return [e for e in ends if math.isfinite(e)]


_NONPOSITIVE = (Interval(-INF, 0.0, closed_low=False),)  # sqrt, log, x ** 0.5: 0 and below
_NEGATIVE = (Interval(-INF, 0.0, closed_low=False, closed_high=False),)  # x ** 1.5
_ZERO = (Interval(0.0, 0.0),)  # 1 / x, x ** -1
_UNIT_BOUNDARY = (  # acos, asin, atanh: |x| >= 1
    Interval(-INF, -1.0, closed_low=False),
    Interval(1.0, INF, closed_high=False),
)

SQRT = UnsafeFunction("sqrt", _NONPOSITIVE, 1)
RSQRT = UnsafeFunction("rsqrt", _NONPOSITIVE, 1)
LOG = UnsafeFunction("log", _NONPOSITIVE, 1)
LOG1P = UnsafeFunction("log1p", (Interval(-INF, -1.0, closed_low=False),), 1)
RECIPROCAL = UnsafeFunction("reciprocal", _ZERO, 1)
DIVISION = UnsafeFunction("division", _ZERO, 1)
ACOS = UnsafeFunction("acos", _UNIT_BOUNDARY, 0)
ASIN = UnsafeFunction("asin", _UNIT_BOUNDARY, 0)
ATANH = UnsafeFunction("atanh", _UNIT_BOUNDARY, 0)

#: One-argument functions, by their name as a torch function and as a tensor method.
ELEMENTWISE = {
    "sqrt": SQRT,
    "rsqrt": RSQRT,
    "log": LOG,
    "log2": UnsafeFunction("log2", _NONPOSITIVE, 1),
    "log10": UnsafeFunction("log10", _NONPOSITIVE, 1),
    "log1p": LOG1P,
    "reciprocal": RECIPROCAL,
    "acos": ACOS,
    "arccos": ACOS,
    "asin": ASIN,
    "arcsin": ASIN,
    "atanh": ATANH,
    "arctanh": ATANH,
}
_POWER_NAMES = frozenset({"pow", "float_power"})
#: Functions that overflow to ``inf`` above the largest ``float32`` input they can take
#: (their derivative too); guarded with 0, where they are finite.
OVERFLOWING = {
    "exp": UnsafeFunction("exp", (Interval(math.log(3.4028234663852886e38), INF),), 0),
    "expm1": UnsafeFunction("expm1", (Interval(math.log(3.4028234663852886e38), INF),), 0),
    "exp2": UnsafeFunction("exp2", (Interval(128.0, INF),), 0),
}
_ONE_ARGUMENT = {**ELEMENTWISE, **OVERFLOWING}
_DIVISION_NAMES = frozenset({"div", "divide", "true_divide"})
_OPERATOR_NAMES = frozenset({"__pow__", "__rpow__", "__truediv__", "__rtruediv__"})


def singular_function_names() -> frozenset[str]:
    """The names, as torch functions, tensor methods and operators, of the functions whose
    derivative is infinite or nan somewhere (``gradfix trace`` watches their backward)."""
    return frozenset(ELEMENTWISE) | _POWER_NAMES | _DIVISION_NAMES | _OPERATOR_NAMES


@dataclass(frozen=True)
class UnsafeUse:
    """An unsafe call in the source: ``node`` applies ``function`` to ``argument``."""

    node: ast.expr
    argument: ast.expr
    function: UnsafeFunction


def power_function(exponent: ast.expr) -> UnsafeFunction | None:
    """What `x ** exponent` is unsafe at: None for 0, 1, 2, 3...; a tensor or unknown
    exponent counts as fractional (its gradient also needs `log(x)`)."""
    value = literal_number(exponent)
    if value is None:
        return UnsafeFunction("pow", _NONPOSITIVE, 1)
    if not math.isfinite(value):
        return None
    if value == int(value):
        return None if value >= 0 else UnsafeFunction("pow", _ZERO, 1)
    return UnsafeFunction("pow", _NONPOSITIVE if value < 1 else _NEGATIVE, 1)


def unsafe_use(node: ast.AST, analysis: Semantic) -> UnsafeUse | None:
    """The unsafe function ``node`` applies, if it is one (see the module docstring)."""
    if type(node) is ast.BinOp:
        op, left, right = type(node.op), node.left, node.right
        if op is ast.Pow and literal_number(left) is None:
            function = power_function(right)
            return UnsafeUse(node, left, function) if function else None
        if op is ast.Div and literal_number(right) is None:
            return UnsafeUse(node, right, DIVISION)
        return None
    if type(node) is ast.Call:
        name = analysis.call_name(node)
        if name is not None:
            return _torch_function_use(node, name)
        if type(node.func) is ast.Attribute:
            return _method_use(node, node.func)
    return None


def _torch_function_use(call: ast.Call, name: str) -> UnsafeUse | None:
    head, _, short = name.rpartition(".")
    if head != "torch":
        return None
    first = argument(call, "input", 0)
    if first is None:
        return None
    if short in _ONE_ARGUMENT:
        return UnsafeUse(call, first, _ONE_ARGUMENT[short])
    second = argument(call, "exponent" if short in _POWER_NAMES else "other", 1)
    if second is None:
        return None
    if short in _POWER_NAMES and literal_number(first) is None:
        function = power_function(second)
        return UnsafeUse(call, first, function) if function else None
    if short in _DIVISION_NAMES and literal_number(second) is None:
        if argument(call, "rounding_mode", None) is None:
            return UnsafeUse(call, second, DIVISION)
    return None


def _method_use(call: ast.Call, func: ast.Attribute) -> UnsafeUse | None:
    method = func.attr
    count = len(call.args) + len(call.keywords)
    # the only argument, passed by position and not unpacked
    single = call.args[0] if count == 1 and call.args else None
    if single is not None and type(single) is ast.Starred:
        single = None
    if method in _ONE_ARGUMENT and count == 0:
        return UnsafeUse(call, func.value, _ONE_ARGUMENT[method])
    if method in _POWER_NAMES and single is not None:
        function = power_function(single)
        return UnsafeUse(call, func.value, function) if function else None
    if method in _DIVISION_NAMES and single is not None:
        if literal_number(single) is None:
            return UnsafeUse(call, single, DIVISION)
    return None


def unsafe_uses(expr: ast.AST, analysis: Semantic) -> list[UnsafeUse]:
    """The unsafe calls inside ``expr``, in source order (not inside lambdas or
    comprehensions, which run elsewhere)."""
    order = analysis.order
    if expr not in order:  # a node built by a rule: walk it
        found = (unsafe_use(node, analysis) for node in _walk(expr))
        return [use for use in found if use is not None]
    # only operators and calls apply a function: read them from the analysis's index
    operators = analysis.descendants(expr, ast.BinOp)
    calls = analysis.descendants(expr, ast.Call)
    if not operators and not calls:
        return []
    candidates = operators or calls
    if operators and calls:
        candidates = sorted(operators + calls, key=order.__getitem__)
    found = (
        unsafe_use(node, analysis) for node in analysis.outside_nested(expr, candidates, _ELSEWHERE)
    )
    return [use for use in found if use is not None]


_ELSEWHERE = (
    ast.Lambda,
    ast.ListComp,
    ast.SetComp,
    ast.DictComp,
    ast.GeneratorExp,
    ast.FunctionDef,
    ast.AsyncFunctionDef,
)


def _walk(node: ast.AST) -> Iterator[ast.AST]:
    """``node`` and its descendants in source order, not entering code that runs
    elsewhere (lambdas, comprehensions)."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        children = source_children(current)
        stack.extend(c for c in reversed(children) if not isinstance(c, _ELSEWHERE))


# -- numbers ---------------------------------------------------------------------------------


def literal_number(expr: ast.AST) -> float | None:
    """The value of a numeric literal expression (`0.5`, `-1`, `1 / 3`, `(1/2.4)`)."""
    if type(expr) is ast.Constant:
        value = expr.value
        return float(value) if type(value) is int or type(value) is float else None
    if type(expr) is ast.UnaryOp and type(expr.op) in (ast.USub, ast.UAdd):
        inner = literal_number(expr.operand)
        if inner is None:
            return None
        return -inner if type(expr.op) is ast.USub else inner
    if type(expr) is ast.BinOp:
        left, right = literal_number(expr.left), literal_number(expr.right)
        if left is None or right is None:
            return None
        return _arithmetic(expr.op, left, right)
    return None


def _arithmetic(operator: ast.operator, left: float, right: float) -> float | None:
    op = type(operator)
    try:
        if op is ast.Add:
            return left + right
        if op is ast.Sub:
            return left - right
        if op is ast.Mult:
            return left * right
        if op is ast.Div:
            return left / right
        if op is ast.Pow:
            value = left**right
            return value if isinstance(value, float) else None
    except (ZeroDivisionError, OverflowError):
        return None
    return None


# -- conditions ------------------------------------------------------------------------------

_COMPARISONS: dict[type[ast.cmpop], str] = {
    ast.Lt: "<",
    ast.LtE: "<=",
    ast.Gt: ">",
    ast.GtE: ">=",
    ast.Eq: "==",
    ast.NotEq: "!=",
}
_COMPARISON_FUNCTIONS = {
    "lt": "<", "less": "<", "le": "<=", "less_equal": "<=", "gt": ">", "greater": ">",
    "ge": ">=", "greater_equal": ">=", "eq": "==", "ne": "!=", "not_equal": "!=",
}  # fmt: skip
_FLIPPED = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "==", "!=": "!="}
#: Conversions that keep a 0/1 mask a 0/1 mask; ``bool`` is the only one giving a bool.
_MASK_CONVERSIONS = frozenset(
    "float double half bfloat16 long int short bool to type type_as".split()
)


@dataclass(frozen=True)
class ValueTest:
    """``left op right`` evaluated at ``at``; a side that is not a number may be tied to
    the unsafe input."""

    left: ast.expr
    op: str
    right: ast.expr
    at: ast.AST


@dataclass(frozen=True)
class Not:
    inner: Condition


@dataclass(frozen=True)
class All:
    parts: tuple[Condition, ...]


@dataclass(frozen=True)
class AnyOf:
    parts: tuple[Condition, ...]


@dataclass(frozen=True)
class Opaque:
    """A condition the analysis cannot read (`torch.isfinite(x)`, a function argument)."""


Condition = Union[ValueTest, Not, All, AnyOf, Opaque]


def _is_invert(expr: ast.AST) -> TypeGuard[ast.UnaryOp]:
    return type(expr) is ast.UnaryOp and type(expr.op) is ast.Invert


def _binary(expr: ast.AST, *ops: type[ast.operator]) -> TypeGuard[ast.BinOp]:
    return type(expr) is ast.BinOp and type(expr.op) in ops


def _positional(call: ast.Call) -> list[ast.expr]:
    """The values passed by position, without ``*unpacking``."""
    return [a for a in call.args if type(a) is not ast.Starred]


def parse_condition(expr: ast.expr, at: ast.AST, analysis: Semantic, depth: int = 0) -> Condition:
    """Read a bool (or 0/1) tensor expression, following names to their bindings."""
    if depth > 8:
        return Opaque()
    recurse = lambda e, where=at: parse_condition(e, where, analysis, depth + 1)  # noqa: E731
    if type(expr) is ast.Compare:
        return _parse_comparison(expr, at, analysis, depth)
    if _is_invert(expr):
        return Not(recurse(expr.operand))
    if type(expr) is ast.BinOp:
        op = type(expr.op)
        if op is ast.BitAnd:
            return All((recurse(expr.left), recurse(expr.right)))
        if op is ast.BitOr:
            return AnyOf((recurse(expr.left), recurse(expr.right)))
        if op is ast.Sub and literal_number(expr.left) == 1.0:
            return Not(recurse(expr.right))  # 1 - mask
        return Opaque()
    if type(expr) is ast.Call:
        return _parse_condition_call(expr, at, analysis, depth)
    if type(expr) is ast.Name:
        binding = analysis.reaching_binding(expr, at)
        if binding and binding.kind == "assign" and binding.value is not None:
            if binding.unpack_index is None:
                return recurse(binding.value, binding.node)
    return Opaque()


def _parse_comparison(expr: ast.Compare, at: ast.AST, analysis: Semantic, depth: int) -> Condition:
    operands = [expr.left, *expr.comparators]
    parts: list[Condition] = []
    for index, operator in enumerate(expr.ops):
        op = _COMPARISONS.get(type(operator))
        if op is None:
            return Opaque()
        parts.append(_comparison(operands[index], op, operands[index + 1], at, analysis, depth))
    return parts[0] if len(parts) == 1 else All(tuple(parts))


def _comparison(
    left: ast.expr, op: str, right: ast.expr, at: ast.AST, analysis: Semantic, depth: int
) -> Condition:
    """``left op right``; `mask > 0` on a 0/1 mask reads as the mask's own condition."""
    if literal_number(left) is not None:
        left, op, right = right, _FLIPPED[op], left
    bound = literal_number(right)
    if bound is not None and 0.0 <= bound <= 1.0 and resolve_mask(left, at, analysis, depth + 1):
        inner = parse_condition(left, at, analysis, depth + 1)
        as_mask = _mask_comparison(op, bound)
        if as_mask is True:
            return inner
        if as_mask is False:
            return Not(inner)
    return ValueTest(left, op, right, at)


def _mask_comparison(op: str, bound: float) -> bool | None:
    """Whether ``mask op bound`` is the mask (True), its negation (False), or neither."""
    truth = {value: _compare(value, op, bound) for value in (0.0, 1.0)}
    if truth == {0.0: False, 1.0: True}:
        return True
    if truth == {0.0: True, 1.0: False}:
        return False
    return None


def _parse_condition_call(call: ast.Call, at: ast.AST, analysis: Semantic, depth: int) -> Condition:
    name = analysis.call_name(call)
    func = call.func
    args = _positional(call)
    if name is not None and name.startswith("torch."):
        short = name[len("torch.") :]
        if short in _COMPARISON_FUNCTIONS and len(args) == 2:
            return _comparison(args[0], _COMPARISON_FUNCTIONS[short], args[1], at, analysis, depth)
        if short in ("logical_not", "bitwise_not") and len(args) == 1:
            return Not(parse_condition(args[0], at, analysis, depth + 1))
        if short in ("logical_and", "logical_or") and len(args) == 2:
            parts = tuple(parse_condition(a, at, analysis, depth + 1) for a in args)
            return All(parts) if short == "logical_and" else AnyOf(parts)
        return Opaque()
    if name is None and type(func) is ast.Attribute:
        method, receiver = func.attr, func.value
        if method in _COMPARISON_FUNCTIONS and len(args) == 1:
            op = _COMPARISON_FUNCTIONS[method]
            return _comparison(receiver, op, args[0], at, analysis, depth)
        if method in _MASK_CONVERSIONS:
            return parse_condition(receiver, at, analysis, depth + 1)
        if method == "logical_not" and not args:
            return Not(parse_condition(receiver, at, analysis, depth + 1))
        if method in ("logical_and", "logical_or") and len(args) == 1:
            parts = (
                parse_condition(receiver, at, analysis, depth + 1),
                parse_condition(args[0], at, analysis, depth + 1),
            )
            return All(parts) if method == "logical_and" else AnyOf(parts)
    return Opaque()


def _compare(value: float, op: str, bound: float) -> bool:
    if op == "<":
        return value < bound
    if op == "<=":
        return value <= bound
    if op == ">":
        return value > bound
    if op == ">=":
        return value >= bound
    if op == "==":
        return value == bound
    return value != bound


def _tests(condition: Condition) -> Iterator[ValueTest]:
    if isinstance(condition, ValueTest):
        yield condition
    elif isinstance(condition, Not):
        yield from _tests(condition.inner)
    elif isinstance(condition, (All, AnyOf)):
        for part in condition.parts:
            yield from _tests(part)


# -- tying a test to the unsafe input ---------------------------------------------------------


@dataclass(frozen=True)
class _Tie:
    """A test tied to the unsafe input: both derive from one base value ``t``."""

    tested: str  # how the tested side derives from t: "id", "abs" or "neg"
    used: str  # how the unsafe input derives from t
    bound: float | None  # the literal on the other side, or None when unknown
    op: str


def _peel(expr: ast.expr, analysis: Semantic) -> tuple[ast.expr, str]:
    """``x.abs()`` / ``torch.abs(x)`` / ``abs(x)`` -> (x, "abs"); ``-x`` -> (x, "neg")."""
    if type(expr) is ast.UnaryOp and type(expr.op) is ast.USub:
        return expr.operand, "neg"
    if type(expr) is ast.Call:
        func = expr.func
        name = analysis.call_name(expr)
        values = argument_values(expr)
        if name in ("torch.abs", "torch.absolute") and len(values) == 1:
            return values[0], "abs"
        if type(func) is ast.Name and func.id == "abs" and not analysis.bindings(func):
            if len(values) == 1:
                return values[0], "abs"
        if name is None and type(func) is ast.Attribute and not values:
            if func.attr in ("abs", "absolute"):
                return func.value, "abs"
    return expr, "id"


def _apply(transform: str, value: float) -> float:
    if transform == "abs":
        return abs(value)
    if transform == "neg":
        return -value
    return value


def same_value(
    first: ast.expr, first_at: ast.AST, second: ast.expr, second_at: ast.AST, analysis: Semantic
) -> bool:
    """The two expressions are spelled alike and each name in them is the same binding."""
    if normalized_code(first) != normalized_code(second):
        return False
    for name_a, name_b in zip(_names(first), _names(second)):
        binding_a = analysis.reaching_binding(name_a, first_at)
        binding_b = analysis.reaching_binding(name_b, second_at)
        if binding_a is not binding_b:
            return False
    return True


def _names(expr: ast.AST) -> list[ast.Name]:
    """The names an expression reads (not attribute names or keywords)."""
    return [node for node in _walk(expr) if type(node) is ast.Name]


def _tie(test: ValueTest, use: UnsafeUse, use_at: ast.AST, analysis: Semantic) -> _Tie | None:
    """The tested side is the left one (`x > eps`; literals were moved to the right): with
    two tensors, `x.abs() < eps` tests `x`, not the threshold `eps`."""
    base, used = _peel(use.argument, analysis)
    tested_base, tested = _peel(test.left, analysis)
    if same_value(tested_base, test.at, base, use_at, analysis):
        return _Tie(tested, used, literal_number(test.right), test.op)
    return None


def discards_singular_inputs(
    condition: Condition,
    kept_when: bool,
    use: UnsafeUse,
    use_at: ast.AST,
    analysis: Semantic,
) -> bool:
    """Some position the condition discards (where it is ``not kept_when``) can feed
    ``use`` a singular input. Needs a test tied to the input (the precision rule)."""
    ties = {id(t): tie for t in _tests(condition) if (tie := _tie(t, use, use_at, analysis))}
    if not ties:
        return False
    used = next(iter(ties.values())).used
    ends = use.function.endpoints() or [0.0]
    unknown = any(tie.bound is None for tie in ties.values())
    substitutes = sorted({e + d for e in ends for d in (-1e-3, 0.0, 1e-3)}) if unknown else [0.0]
    for substitute in substitutes:
        bounds = [tie.bound if tie.bound is not None else substitute for tie in ties.values()]
        for value in _sample_points(ends + bounds):
            if not use.function.is_singular(_apply(used, value)):
                continue
            if _evaluate(condition, value, ties, substitute) is (not kept_when):
                return True
    return False


def _sample_points(ends: list[float]) -> list[float]:
    """One point in each cell of the partition of the line by ``±ends``."""
    cuts = sorted({c for e in ends for c in (e, -e)})
    points = list(cuts) + [cuts[0] - 1.0, cuts[-1] + 1.0]
    points += [(a + b) / 2 for a, b in zip(cuts, cuts[1:])]
    return points


def _evaluate(
    condition: Condition, value: float, ties: dict[int, _Tie], substitute: float
) -> bool | None:
    """Three-valued: True/False when the tied tests decide it, None when unknown."""
    if isinstance(condition, ValueTest):
        tie = ties.get(id(condition))
        if tie is None:
            return None
        bound = tie.bound if tie.bound is not None else substitute
        return _compare(_apply(tie.tested, value), tie.op, bound)
    if isinstance(condition, Not):
        inner = _evaluate(condition.inner, value, ties, substitute)
        return None if inner is None else not inner
    if isinstance(condition, (All, AnyOf)):
        results = [_evaluate(p, value, ties, substitute) for p in condition.parts]
        decisive = isinstance(condition, AnyOf)  # True decides an `or`, False an `and`
        if decisive in results:
            return decisive
        return None if None in results else not decisive
    return None


# -- masks (GF301) -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Spelled:
    """The condition as written at ``expr``, its parentheses stripped when ``strip``."""

    expr: ast.expr
    strip: bool = True


@dataclass(frozen=True)
class Negated:
    """``~inner``."""

    inner: Selector


@dataclass(frozen=True)
class Positive:
    """``name > 0``: a float mask selected by its own values."""

    name: ast.Name


#: How a fix spells the bool expression that selects where a mask is 1; decided on `ast`,
#: spelled in LibCST by :func:`selector_node`.
Selector = Union[Spelled, Negated, Positive]


def selector_expression(selector: Selector) -> ast.expr:
    """The source expression a selector reads (its names and calls)."""
    while isinstance(selector, Negated):
        selector = selector.inner
    return selector.expr if isinstance(selector, Spelled) else selector.name


def selector_node(selector: Selector, editor: Editor) -> cst.BaseExpression:
    """The LibCST expression of ``selector`` in the file ``editor`` fixes."""
    if isinstance(selector, Spelled):
        node = expression_node(editor, selector.expr)
        return strip_parens(node) if selector.strip else node
    if isinstance(selector, Negated):
        return negated(selector_node(selector.inner, editor))
    name = expression_node(editor, selector.name)
    return cst.Comparison(name, [cst.ComparisonTarget(cst.GreaterThan(), cst.Integer("0"))])


@dataclass(frozen=True)
class Mask:
    """A 0/1 mask tensor and a bool expression that selects where it is 1."""

    condition: Condition
    selector: Selector  # valid at the use site, for `torch.where(selector, ...)`
    is_bool: bool


#: the expression types :func:`resolve_mask` may resolve: a slice of any other type
#: (``x[0]``, ``x[:, 1:]``, ``x[i, j]``) is no mask
MASK_TYPES: frozenset[type[ast.expr]] = frozenset(
    {ast.Compare, ast.UnaryOp, ast.BinOp, ast.Call, ast.Name}
)


def resolve_mask(expr: ast.expr, at: ast.AST, analysis: Semantic, depth: int = 0) -> Mask | None:
    """``expr`` provably holds 0/1 values: a comparison (bool), a conversion of one
    (`(x < 0.003).float()`), or a name bound to one of these (an expression of a type in
    :data:`MASK_TYPES`)."""
    if depth > 8:
        return None
    if _is_bool_expression(expr, analysis):
        condition = parse_condition(expr, at, analysis, depth + 1)
        return Mask(condition, Spelled(expr), is_bool=True)
    if type(expr) is ast.Call and type(expr.func) is ast.Attribute:
        method = expr.func.attr
        if analysis.call_name(expr) is None and method in _MASK_CONVERSIONS:
            inner = resolve_mask(expr.func.value, at, analysis, depth + 1)
            if inner is None:
                return None
            return Mask(inner.condition, inner.selector, method == "bool")
    if _binary(expr, ast.Sub):
        inner = resolve_mask(expr.right, at, analysis, depth + 1)
        if literal_number(expr.left) == 1.0 and inner is not None:
            return Mask(Not(inner.condition), Negated(inner.selector), is_bool=False)
    if type(expr) is ast.Name:
        return _resolve_mask_name(expr, at, analysis, depth)
    return None


def _resolve_mask_name(name: ast.Name, at: ast.AST, analysis: Semantic, depth: int) -> Mask | None:
    binding = analysis.reaching_binding(name, at)
    if binding is None or binding.kind != "assign" or binding.value is None:
        return None
    if binding.unpack_index is not None:
        return None
    inner = resolve_mask(binding.value, binding.node, analysis, depth + 1)
    if inner is None:
        return None
    if inner.is_bool:
        return Mask(inner.condition, Spelled(name, strip=False), is_bool=True)
    # A float mask: select with the comparison it was built from, when its names still
    # mean the same here; otherwise compare the mask itself.
    selector = inner.selector
    if not _means_the_same_at(selector_expression(selector), at, analysis):
        selector = Positive(name)
    return Mask(inner.condition, selector, is_bool=False)


def _means_the_same_at(expr: ast.expr, at: ast.AST, analysis: Semantic) -> bool:
    scope = analysis.scope_of(at)
    for name in _names(expr):
        if analysis.scope_of(name) is not scope:
            return False
        if analysis.reaching_binding(name) is not analysis.reaching_binding(name, at):
            return False
    return True


def _is_bool_expression(expr: ast.expr, analysis: Semantic) -> bool:
    """A comparison or a logical combination of comparisons (always a bool tensor)."""
    if type(expr) is ast.Compare:
        return True
    if _is_invert(expr):
        return _is_bool_expression(expr.operand, analysis)
    if _binary(expr, ast.BitAnd, ast.BitOr):
        left, right = expr.left, expr.right
        return _is_bool_expression(left, analysis) and _is_bool_expression(right, analysis)
    if type(expr) is ast.Call:
        name = analysis.call_name(expr)
        short = name[len("torch.") :] if name and name.startswith("torch.") else None
        if name is None and type(expr.func) is ast.Attribute:
            short = expr.func.attr
        return short in _COMPARISON_FUNCTIONS or short in (
            "logical_not", "logical_and", "logical_or", "isfinite", "isnan", "isinf"
        )  # fmt: skip
    return False


def complement_of(expr: ast.expr, mask_expr: ast.expr, at: ast.AST, analysis: Semantic) -> bool:
    """``expr`` is `1 - mask`, `~mask`, `mask.logical_not()`, `torch.logical_not(mask)`
    (possibly converted: `(~mask).float()`)."""
    if type(expr) is ast.Call and type(expr.func) is ast.Attribute:
        method, receiver = expr.func.attr, expr.func.value
        if analysis.call_name(expr) is None and method in _MASK_CONVERSIONS:
            return complement_of(receiver, mask_expr, at, analysis)
        if method == "logical_not" and not argument_values(expr):
            return same_value(receiver, at, mask_expr, at, analysis)
    if _negates(expr, mask_expr, at, analysis):
        return True
    inner: ast.expr | None = None
    if _binary(expr, ast.Sub):
        if literal_number(expr.left) == 1.0:
            inner = expr.right
    elif _is_invert(expr):
        inner = expr.operand
    elif type(expr) is ast.Call and analysis.call_name(expr) == "torch.logical_not":
        values = argument_values(expr)
        inner = values[0] if len(values) == 1 else None
    return inner is not None and same_value(inner, at, mask_expr, at, analysis)


_COMPLEMENTARY = {"<": ">=", ">=": "<", ">": "<=", "<=": ">", "==": "!=", "!=": "=="}


def _negates(expr: ast.expr, mask_expr: ast.expr, at: ast.AST, analysis: Semantic) -> bool:
    """Two masks built from complementary comparisons (`x < c` and `x >= c`)."""
    mask, other = resolve_mask(mask_expr, at, analysis), resolve_mask(expr, at, analysis)
    if mask is None or other is None:
        return False
    first, second = mask.condition, other.condition
    if not isinstance(first, ValueTest) or not isinstance(second, ValueTest):
        return False
    return (
        _COMPLEMENTARY[first.op] == second.op
        and same_value(first.left, first.at, second.left, second.at, analysis)
        and same_value(first.right, first.at, second.right, second.at, analysis)
    )


def indirect_unsafe_uses(
    branch: ast.expr, at: ast.AST, analysis: Semantic
) -> Iterator[tuple[UnsafeUse, ast.AST]]:
    """Unsafe uses bound to a name that the branch multiplies (`s` in
    `torch.where(d > 0, s, 0)` after `s = torch.sqrt(d)`), with the binding statement."""
    for factor in factors(branch):
        if type(factor) is not ast.Name:
            continue
        binding = analysis.reaching_binding(factor, at)
        if binding is None or binding.kind != "assign" or binding.value is None:
            continue
        if binding.unpack_index is None:
            for use in unsafe_uses(binding.value, analysis):
                yield use, binding.node


# -- products --------------------------------------------------------------------------------


def factors(expr: ast.expr) -> list[ast.expr]:
    """The multiplicative factors of a product (`a * b / c` -> a, b; not the divisor)."""
    if _binary(expr, ast.Mult):
        return factors(expr.left) + factors(expr.right)
    if _binary(expr, ast.Div):
        return factors(expr.left)
    return [expr]


def branch_without(product: ast.expr, factor: ast.expr) -> ast.expr:
    """``product`` with the factor ``factor`` (a node inside it) taken out: the branch a
    mask weights, for the analysis (:func:`without_factor` builds it for the fix)."""
    if product is factor or type(product) is not ast.BinOp:
        return ast.Constant(1)
    left, right = product.left, product.right
    if type(product.op) is ast.Mult:
        if left is factor:
            return right
        if right is factor:
            return left
    if _contains(left, factor):
        return ast.BinOp(branch_without(left, factor), product.op, right)
    return ast.BinOp(left, product.op, branch_without(right, factor))


def _contains(tree: ast.AST, node: ast.AST) -> bool:
    return any(n is node for n in _walk(tree))


def without_factor(product: cst.BaseExpression, factor: cst.BaseExpression) -> cst.BaseExpression:
    """``product`` with the factor ``factor`` (a node inside it) taken out, its layout
    kept (:func:`branch_without` on LibCST)."""
    if product is factor or not isinstance(product, cst.BinaryOperation):
        return cst.Integer("1")
    left, right = product.left, product.right
    if isinstance(product.operator, cst.Multiply):
        if left is factor:
            return right
        if right is factor:
            return left
    if _cst_contains(left, factor):
        return product.with_changes(left=without_factor(left, factor))
    return product.with_changes(right=without_factor(right, factor))


def _cst_contains(tree: cst.CSTNode, node: cst.CSTNode) -> bool:
    return tree is node or any(_cst_contains(child, node) for child in tree.children)


# -- fixing ----------------------------------------------------------------------------------


def expression_node(editor: Editor, node: ast.expr) -> cst.BaseExpression:
    """The LibCST expression at ``node``'s range (LookupError: none, so no fix)."""
    found = editor.node(node)
    if not isinstance(found, cst.BaseExpression):
        raise LookupError(f"{type(found).__name__} is not an expression")
    return found


def strip_parens(expr: cst.BaseExpression) -> cst.BaseExpression:
    """``(x)`` -> ``x``, unless the parentheses hold a comment or a line break."""
    if not expr.lpar:
        return expr
    whitespace = [p.whitespace_after for p in expr.lpar] + [p.whitespace_before for p in expr.rpar]
    if any(not isinstance(w, cst.SimpleWhitespace) for w in whitespace):
        return expr
    return expr.with_changes(lpar=[], rpar=[])


def negated(selector: cst.BaseExpression) -> cst.BaseExpression:
    """``~selector``, parenthesised when it is an operation (`~(x < 0.003)`)."""
    if not isinstance(selector, (cst.Name, cst.Attribute, cst.Call, cst.Subscript)):
        selector = selector.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    return cst.UnaryOperation(cst.BitInvert(), selector)


def guard(
    argument: cst.BaseExpression,
    function: UnsafeFunction,
    selector: cst.BaseExpression,
    kept_when: bool,
    editor: Editor,
) -> cst.Call:
    """The unsafe input ``argument`` with a harmless value where the branch is discarded:
    `torch.where(cond, x, torch.ones_like(x))` (kept where cond) or
    `torch.where(cond, torch.ones_like(x), x)` (kept where not cond)."""
    value = strip_parens(argument)
    like = "ones_like" if function.safe_value == 1 else "zeros_like"
    harmless = cst.Call(editor.torch_attr(like), [cst.Arg(value)])
    kept, discarded = (value, harmless) if kept_when else (harmless, value)
    arguments = [cst.Arg(strip_parens(selector)), cst.Arg(kept), cst.Arg(discarded)]
    return cst.Call(editor.torch_attr("where"), arguments)


def double_where(
    root: cst.BaseExpression,
    argument: cst.BaseExpression,
    value: cst.Name,
    editor: Editor,
) -> cst.Call:
    """``root`` (a square root of ``argument``, which ``value`` names) behind a double
    where: `torch.where(v > 0, torch.sqrt(torch.where(v > 0, v, torch.ones_like(v))), 0)`.
    The same values (the root of 0 is 0), and a gradient of 0 instead of `inf * 0` at 0."""
    positive = cst.Comparison(value, [cst.ComparisonTarget(cst.GreaterThan(), cst.Integer("0"))])
    guarded = guard(value, SQRT, positive, True, editor)
    inner = editor.replace_nodes(root, {argument: guarded})
    assert isinstance(inner, cst.BaseExpression)
    kept = inner.with_changes(lpar=[], rpar=[]) if isinstance(inner, cst.Call) else inner
    arguments = [cst.Arg(positive), cst.Arg(kept), cst.Arg(cst.Integer("0"))]
    return cst.Call(editor.torch_attr("where"), arguments, lpar=root.lpar, rpar=root.rpar)


#: Random or stateful torch functions: a condition calling them cannot be evaluated twice.
_IMPURE_TORCH = frozenset(
    "rand rand_like randn randn_like randint randint_like randperm bernoulli multinomial "
    "normal poisson dropout".split()
)
_PURE_METHODS = frozenset(
    "abs absolute float double half bfloat16 long int bool to type type_as detach "
    "logical_not logical_and logical_or isfinite isnan isinf sum mean amax amin max min "
    "norm unsqueeze squeeze view reshape expand expand_as sign".split()
) | frozenset(_COMPARISON_FUNCTIONS)


def is_pure(expr: ast.expr, analysis: Semantic) -> bool:
    """Evaluating ``expr`` twice gives the same value (no random or unknown calls)."""
    for node in _walk(expr):
        if type(node) is not ast.Call:
            continue
        name = analysis.call_name(node)
        if name is not None:
            if not name.startswith("torch.") or name.rpartition(".")[2] in _IMPURE_TORCH:
                return False
            continue
        func = node.func
        if type(func) is ast.Attribute and func.attr in _PURE_METHODS:
            continue
        if type(func) is ast.Name and func.id == "abs" and not analysis.bindings(func):
            continue
        return False
    return True


# -- what cannot carry a gradient ----------------------------------------------------------


def singular_uses(
    branch: ast.expr,
    kept_when: bool,
    condition: Condition,
    node: ast.AST,
    analysis: Semantic,
) -> list[UnsafeUse]:
    """Unsafe uses in ``branch`` (kept where ``condition`` is ``kept_when``) that see a
    singular input where the branch is discarded; none unless the branch requires grad."""
    if not analysis.requires_grad(branch, node):
        return []
    return [
        use
        for use in unsafe_uses(branch, analysis)
        if discards_singular_inputs(condition, kept_when, use, node, analysis)
    ]


def singular_indirect(
    branch: ast.expr,
    kept_when: bool,
    condition: Condition,
    node: ast.AST,
    analysis: Semantic,
) -> bool:
    """Like :func:`singular_uses`, through names bound earlier (reported without a fix)."""
    if not analysis.requires_grad(branch, node):
        return False
    return any(
        discards_singular_inputs(condition, kept_when, use, at, analysis)
        for use, at in indirect_unsafe_uses(branch, node, analysis)
    )


def may_require_grad(expr: ast.expr, at: ast.AST, analysis: Semantic, depth: int = 0) -> bool:
    """``expr`` requires grad, or may: it reads (directly or through local names) a value
    built by a call given ``requires_grad=True`` (`Variable(t, requires_grad=True)`), an
    argument of a method of an ``nn.Module`` class, or an argument that a call in this
    file passes such a value. For rewrites that keep the forward exactly, which need no
    proof that it requires grad; a helper only called with data (or never called in the
    file, in a class that is not a module) is not enough."""
    if analysis.requires_grad(expr, at):
        return True
    if depth > 6:
        return False
    for name in _names(expr):
        binding = analysis.reaching_binding(name, at)
        if binding is None:
            continue
        if binding.kind == "param" and type(binding.node) is ast.arg:
            if _argument_may_require_grad(binding.node, analysis, depth):
                return True
        elif binding.kind == "assign" and binding.value is not None:
            if _asks_for_grad(binding.value):
                return True
            if may_require_grad(binding.value, binding.node, analysis, depth + 1):
                return True
    return False


def _argument_may_require_grad(param: ast.arg, analysis: Semantic, depth: int) -> bool:
    if param.arg in ("self", "cls"):
        return False
    function = analysis.enclosing_function(param)
    if function is not None and _in_module_class(function, analysis):
        return True
    return any(
        may_require_grad(value, site, analysis, depth + 1)
        for value, site in analysis.passed_arguments(param)
    )


def _in_module_class(function: ast.AST, analysis: Semantic) -> bool:
    """``function`` is a method of an ``nn.Module`` subclass (directly, or through a class
    of this file)."""
    cls = analysis.method_class(function)
    for _ in range(4):
        if cls is None:
            return False
        if any(analysis.is_module_base(base) for base in cls.bases):
            return True
        parents = [b for b in cls.bases if type(b) is ast.Name]
        bindings = analysis.bindings(parents[0]) if len(parents) == 1 else []
        cls = bindings[0].node if len(bindings) == 1 and bindings[0].kind == "class" else None
        if cls is not None and type(cls) is not ast.ClassDef:
            return False
    return False


def _asks_for_grad(value: ast.expr) -> bool:
    if type(value) is not ast.Call:
        return False
    flag = argument(value, "requires_grad", None)
    return type(flag) is ast.Constant and flag.value is True


def assigned_value(
    name: ast.Name, at: ast.AST, analysis: Semantic
) -> tuple[ast.expr, ast.AST] | None:
    """The value a plain assignment bound to ``name`` where it is read at ``at`` (not an
    unpacking), with the binding statement."""
    binding = analysis.reaching_binding(name, at)
    if binding is None or binding.kind != "assign" or binding.value is None:
        return None
    if binding.unpack_index is not None:
        return None
    return binding.value, binding.node
