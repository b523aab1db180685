"""Indexing after a singular op (GF301): `torch.log(p)[p > 0]`, `loss(x, t)[~t.isnan()]`.

Indexing keeps the forward values of the positions it selects, but autograd still runs the
backward of the whole op and scatters the incoming gradient back: the positions indexed
away get a gradient of 0, multiplied by the op's derivative there. Where that derivative
is infinite (`log` at 0, `1 / d` at `d == 0`) or `nan` (a loss against a `nan` target),
`0 * inf` and `0 * nan` are `nan`. Index (mask) the inputs first, then apply the op.

Two shapes, decided on `ast` here and spelled with LibCST by the rule:

- :func:`singular_before_index`: the indexed value applies an unsafe function
  (:mod:`gradfix.unsafe_branch`) whose input the mask tests, and the mask drops singular
  inputs (the precision rule of GF301/GF302). The value is the indexed expression itself or
  a name bound to it earlier whose every read is indexed by the same mask.
- :func:`nan_data_before_index`: the mask keeps the finite entries of a tensor
  (`~t.isnan()`, `torch.isfinite(t)`, `t == t`) that a loss or an elementwise helper of the
  file is computed from.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from gradfix.semantic import Semantic
from gradfix.semantic.scopes import Binding
from gradfix.semantic.syntax import argument, argument_values, literal_items
from gradfix.unsafe_branch import (
    DIVISION,
    Mask,
    UnsafeUse,
    assigned_value,
    discards_singular_inputs,
    literal_number,
    may_require_grad,
    resolve_mask,
    same_value,
    selector_expression,
    unsafe_uses,
)

#: Losses that compute one value per element with ``reduction="none"``, and whose
#: derivative for the input is `nan` where the target is (not `l1_loss`: the sign of a
#: `nan` difference back-propagates 0).
ELEMENTWISE_LOSSES = frozenset(
    "mse_loss smooth_l1_loss huber_loss binary_cross_entropy "
    "binary_cross_entropy_with_logits poisson_nll_loss kl_div soft_margin_loss".split()
)
_LOSS_MODULES = {
    "MSELoss": "mse_loss",
    "SmoothL1Loss": "smooth_l1_loss",
    "HuberLoss": "huber_loss",
    "BCELoss": "binary_cross_entropy",
    "BCEWithLogitsLoss": "binary_cross_entropy_with_logits",
    "PoissonNLLLoss": "poisson_nll_loss",
    "KLDivLoss": "kl_div",
    "SoftMarginLoss": "soft_margin_loss",
}
#: Torch functions (and tensor methods) that work element by element on their tensors.
ELEMENTWISE_FUNCTIONS = frozenset(
    "abs square sqrt exp log log1p pow sigmoid tanh relu sub add mul div subtract "
    "multiply divide neg negative clamp clip maximum minimum".split()
)
_ARITHMETIC = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.Pow, ast.FloorDiv, ast.Mod)


@dataclass(frozen=True)
class SingularIndex:
    """``index`` (a bool mask) drops positions where ``use`` is singular; ``use`` is in
    ``value`` (the indexed expression, or the value bound to the indexed name at
    ``binding``)."""

    use: UnsafeUse
    value: ast.expr
    mask: Mask
    binding: Binding | None  # the name's binding when the indexed value is a name
    condition_at_binding: ast.expr | None  # the mask spelled where the name is bound

    @property
    def index_first(self) -> bool:
        """The fix moves the index onto the input: the input is the only tensor operand
        (`log(x)`, `x ** 0.5`, `1 / x`) and the op is the whole indexed value."""
        if self.binding is not None or self.use.node is not self.value:
            return False
        if self.use.function is DIVISION:
            operands = argument_values(self.use.node) if type(self.use.node) is ast.Call else []
            numerator = self.use.node.left if type(self.use.node) is ast.BinOp else None
            if numerator is None and operands:
                numerator = operands[0]
            return numerator is not None and literal_number(numerator) is not None
        return True


def singular_before_index(node: ast.Subscript, analysis: Semantic) -> SingularIndex | None:
    """``node`` indexes the result of a singular op with a mask that drops singular inputs."""
    mask = resolve_mask(node.slice, node, analysis)
    if mask is None or not mask.is_bool:
        return None
    value = node.value
    binding = None
    at: ast.AST = node
    if type(value) is ast.Name:
        binding = analysis.reaching_binding(value, node)
        assigned = assigned_value(value, node, analysis)
        if binding is None or assigned is None:
            return None
        value, at = assigned
    for use in unsafe_uses(value, analysis):
        if not _elementwise_path(value, use.node):
            continue
        if not discards_singular_inputs(mask.condition, True, use, at, analysis):
            continue
        if not may_require_grad(use.node, at, analysis):
            continue
        spelled = None
        if binding is not None:
            spelled = _condition_at(node.slice, node, binding.node, analysis)
            if spelled is not None and not _only_indexed_by(binding, node, analysis):
                spelled = None
        return SingularIndex(use, value, mask, binding, spelled)
    return None


def _elementwise_path(root: ast.expr, target: ast.expr) -> bool:
    """``target`` is ``root`` or reached from it through arithmetic only, so each position
    of ``root`` comes from the same position of ``target``."""
    current: ast.AST = root
    while current is not target:
        if type(current) is ast.BinOp and type(current.op) in _ARITHMETIC:
            inside_left = any(n is target for n in ast.walk(current.left))
            current = current.left if inside_left else current.right
        elif type(current) is ast.UnaryOp:
            current = current.operand
        else:
            return False
    return True


def _condition_at(
    index: ast.expr, use_at: ast.AST, binding_at: ast.AST, analysis: Semantic
) -> ast.expr | None:
    """The mask as an expression that means the same at ``binding_at`` (where the indexed
    name is bound, before the mask may exist): the mask's own spelling, or the comparison
    a mask name is bound to."""
    candidates: list[tuple[ast.expr, ast.AST]] = [(index, use_at)]
    if type(index) is ast.Name:
        mask_binding = analysis.reaching_binding(index, use_at)
        if mask_binding is not None and mask_binding.kind == "assign" and mask_binding.value:
            if mask_binding.unpack_index is None:
                candidates.append((mask_binding.value, mask_binding.node))
    for candidate, at in candidates:
        if _same_bindings(candidate, at, binding_at, analysis):
            return candidate
    return None


def _same_bindings(expr: ast.expr, at: ast.AST, other_at: ast.AST, analysis: Semantic) -> bool:
    names = [n for n in ast.walk(expr) if type(n) is ast.Name]
    return all(
        analysis.reaching_binding(n, at) is not None
        and analysis.reaching_binding(n, at) is analysis.reaching_binding(n, other_at)
        for n in names
    )


def _only_indexed_by(binding: Binding, node: ast.Subscript, analysis: Semantic) -> bool:
    """Every read of the name ``binding`` binds is indexed by the same mask as ``node``
    (then guarding the bound value changes no value that is read)."""
    reads = _subscript_reads(binding, analysis)
    return reads is not None and all(
        same_value(read.slice, read, node.slice, node, analysis) for read in reads
    )


# -- a constant divisor with zeros, then a plain index ------------------------------------------

#: Constructors of a tensor from a literal list of numbers (``torch.tensor([1., 0., 1.])``).
_LITERAL_TENSORS = frozenset(
    "torch." + n for n in "tensor Tensor FloatTensor DoubleTensor as_tensor".split()
)


#: Constructors of a tensor whose one size argument gives a vector's length.
_SIZED_VECTORS = _LITERAL_TENSORS | frozenset(
    "torch." + n for n in "ones zeros rand randn empty full".split()
)


@dataclass(frozen=True)
class ZeroDivisorIndex:
    """``index`` (integers or a slice) reads only positions of ``use`` (a division) where
    its divisor, a literal tensor, is not zero; ``zeros`` are the positions where it is."""

    use: UnsafeUse
    binding: Binding | None  # the name's binding when the indexed value is a name
    zeros: frozenset[int]


def builds_zero_vector(analysis: Semantic) -> bool:
    """The file builds a tensor from literal numbers, one of them zero, somewhere
    (``torch.tensor([1., 0.])``): the divisor :func:`zero_divisor_before_index` finds is
    one (ask once per file: most files index many tensors and divide by no such vector)."""
    calls = analysis.calls_that_may_be(_LITERAL_TENSORS)
    return any(
        0 in (_literal_numbers(call) or ()) and analysis.call_name(call) in _LITERAL_TENSORS
        for call in calls
    )


def zero_divisor_before_index(node: ast.Subscript, analysis: Semantic) -> ZeroDivisorIndex | None:
    """``(w / torch.tensor([1., 0., 1.]))[0]``, or ``r = w / d`` whose every read is a
    plain index of the positions where ``d`` is not zero: the forward never shows the
    division by zero, the gradient of ``w`` there is ``0 / 0 = nan``."""
    value: ast.expr = node.value
    binding, at = None, node
    if type(value) is ast.Name:
        binding = analysis.reaching_binding(value, node)
        assigned = assigned_value(value, node, analysis)
        if binding is None or assigned is None:
            return None
        value, at = assigned  # type: ignore[assignment]
    for use in unsafe_uses(value, analysis):
        if use.function is not DIVISION or not _elementwise_path(value, use.node):
            continue
        divisor = _literal_vector(use.argument, at, analysis)
        zeros = frozenset(i for i, v in enumerate(divisor or []) if v == 0)
        if divisor is None or not zeros or not may_require_grad(use.node, at, analysis):
            continue
        # a read of the whole result shows the division by zero in the forward
        reads = [node] if binding is None else _subscript_reads(binding, analysis) or []
        vector = _is_vector(_numerator(use), at, len(divisor), analysis)
        if reads and all(_misses(r.slice, len(divisor), zeros, vector) for r in reads):
            return ZeroDivisorIndex(use, binding, zeros)
    return None


def _numerator(use: UnsafeUse) -> ast.expr | None:
    node = use.node
    if type(node) is ast.BinOp:
        return node.left
    values = argument_values(node) if type(node) is ast.Call else []
    return values[0] if len(values) == 2 and values[1] is use.argument else None


def _is_vector(expr: ast.expr | None, at: ast.AST, length: int, analysis: Semantic) -> bool:
    """``expr`` is a 1-D tensor of ``length`` (``torch.ones(3)``, a name bound to one):
    its division by the literal vector is indexed along that one dimension."""
    if type(expr) is ast.Name:
        assigned = assigned_value(expr, at, analysis)
        if assigned is None:
            return False
        expr, at = assigned
    if type(expr) is not ast.Call or (analysis.call_name(expr) or "") not in _SIZED_VECTORS:
        return False
    sizes = expr.args  # keywords (``requires_grad=True``, ``dtype``) give no size
    if analysis.call_name(expr) in _LITERAL_TENSORS:
        items = literal_items(sizes[0]) if sizes else None
        return items is not None and len(items) == length
    return len(sizes) == 1 and literal_number(sizes[0]) == length


def _literal_vector(expr: ast.expr, at: ast.AST, analysis: Semantic) -> list[float] | None:
    """The numbers of a 1-D tensor built from a literal list (or a name or a ``self.``
    attribute bound to one)."""
    if type(expr) is ast.Name:
        assigned = assigned_value(expr, at, analysis)
        if assigned is None:
            return None
        expr, at = assigned  # type: ignore[assignment]
    elif type(expr) is ast.Attribute:
        values = analysis.self_attribute_values(expr, at)
        if len(values) != 1:
            return None
        expr = values[0][0]
    if type(expr) is not ast.Call or analysis.call_name(expr) not in _LITERAL_TENSORS:
        return None
    return _literal_numbers(expr)


def _literal_numbers(call: ast.Call) -> list[float] | None:
    """The numbers of the one literal list ``call`` is passed (``torch.tensor([1., 0.])``)."""
    values = argument_values(call)
    items = literal_items(values[0]) if len(values) == 1 else None
    numbers = [literal_number(item) for item in items or []]
    if not numbers or any(n is None for n in numbers):
        return None
    return numbers  # type: ignore[return-value]


def _subscript_reads(binding: Binding, analysis: Semantic) -> list[ast.Subscript] | None:
    """The reads of the name ``binding`` binds, each the value of a subscript; None when
    one is not (the whole value is used)."""
    scope = analysis.scope_of(binding.node)
    reads: list[ast.Subscript] = []
    for name in analysis.name_nodes_in(scope.node, binding.name):
        if type(name.ctx) is not ast.Load or analysis.scope_of(name) is not scope:
            continue
        if analysis.reaching_binding(name) is not binding:
            continue
        parent = analysis.parent(name)
        if type(parent) is not ast.Subscript or parent.value is not name:
            return None
        reads.append(parent)
    return reads


def _misses(index: ast.expr, length: int, zeros: frozenset[int], vector: bool) -> bool:
    """The integer or slice ``index`` (of literals) along the last dimension, of
    ``length``, reads none of the positions ``zeros``: ``[..., k]``, or ``[k]`` when the
    result is a ``vector``."""
    if type(index) is ast.Tuple and len(index.elts) == 2:
        first, index = index.elts
        if not (type(first) is ast.Constant and first.value is Ellipsis):
            return False
    elif not vector:
        return False
    number = literal_number(index)
    if number is not None:
        position = int(number) + length if number < 0 else int(number)
        return number == int(number) and 0 <= position < length and position not in zeros
    if type(index) is not ast.Slice:
        return False
    bounds = [index.lower, index.upper, index.step]
    numbers = [None if b is None else literal_number(b) for b in bounds]
    if any(b is not None and n is None for b, n in zip(bounds, numbers)):
        return False
    start, stop, step = (None if n is None else int(n) for n in numbers)
    selected = range(length)[slice(start, stop, step)]
    return len(selected) > 0 and not zeros.intersection(selected)


# -- nan in the data ---------------------------------------------------------------------------


@dataclass(frozen=True)
class NanMasked:
    """``index`` keeps the finite entries of ``tested``, an argument of ``call`` (a loss
    computed per element); ``fixable`` when every tensor argument can take the index."""

    call: ast.Call
    tensors: tuple[ast.expr, ...]  # the arguments to index first
    fixable: bool


def nan_data_before_index(node: ast.Subscript, analysis: Semantic) -> NanMasked | None:
    """``node`` masks a per-element loss with the finite entries of one of its inputs."""
    call = node.value
    if type(call) is not ast.Call:
        return None
    tested = finite_entries_of(node.slice, node, analysis)
    if tested is None:
        return None
    tensors = _elementwise_call_tensors(call, node, analysis)
    if tensors is None or not any(same_value(t, node, tested, node, analysis) for t in tensors):
        return None
    if not any(may_require_grad(t, node, analysis) for t in tensors):
        return None
    fixable = not call.keywords or all(k.arg is not None for k in call.keywords)
    return NanMasked(call, tuple(tensors), fixable)


def finite_entries_of(
    index: ast.expr, at: ast.AST, analysis: Semantic, depth: int = 0
) -> ast.expr | None:
    """The tensor ``t`` when ``index`` keeps its non-nan entries: `~t.isnan()`,
    `~torch.isnan(t)`, `torch.logical_not(torch.isnan(t))`, `t.isfinite()`,
    `torch.isfinite(t)`, `t == t`, or a name bound to one of these."""
    if depth > 4:
        return None
    if type(index) is ast.Name:
        assigned = assigned_value(index, at, analysis)
        if assigned is None:
            return None
        value, bound_at = assigned
        return finite_entries_of(value, bound_at, analysis, depth + 1)
    if type(index) is ast.Compare and len(index.ops) == 1 and type(index.ops[0]) is ast.Eq:
        left, right = index.left, index.comparators[0]
        if same_value(left, at, right, at, analysis) and type(left) is ast.Name:
            return left
        return None
    if type(index) is ast.UnaryOp and type(index.op) is ast.Invert:
        return _tested_by(index.operand, "isnan", analysis)
    if type(index) is ast.Call and analysis.call_name(index) == "torch.logical_not":
        values = argument_values(index)
        return _tested_by(values[0], "isnan", analysis) if len(values) == 1 else None
    return _tested_by(index, "isfinite", analysis)


def nonfinite_entries_of(cond: ast.expr, at: ast.AST, analysis: Semantic) -> ast.expr | None:
    """The tensor ``t`` when ``cond`` selects its nan entries: `torch.isnan(t)`,
    `t.isnan()`, `~torch.isfinite(t)`, `t != t`, or a name bound to one of these."""
    if type(cond) is ast.Name:
        assigned = assigned_value(cond, at, analysis)
        if assigned is None:
            return None
        value, bound_at = assigned
        return nonfinite_entries_of(value, bound_at, analysis)
    if type(cond) is ast.Compare and len(cond.ops) == 1 and type(cond.ops[0]) is ast.NotEq:
        left, right = cond.left, cond.comparators[0]
        if type(left) is ast.Name and same_value(left, at, right, at, analysis):
            return left
        return None
    if type(cond) is ast.UnaryOp and type(cond.op) is ast.Invert:
        return _tested_by(cond.operand, "isfinite", analysis)
    return _tested_by(cond, "isnan", analysis)


def _tested_by(expr: ast.expr, test: str, analysis: Semantic) -> ast.expr | None:
    """``t`` for `torch.<test>(t)` or `t.<test>()`."""
    if type(expr) is not ast.Call:
        return None
    values = argument_values(expr)
    if analysis.call_name(expr) == f"torch.{test}" and len(values) == 1:
        return values[0]
    func = expr.func
    if type(func) is ast.Attribute and func.attr == test and not values:
        if analysis.call_name(expr) is None:
            return func.value
    return None


def _elementwise_call_tensors(
    call: ast.Call, at: ast.AST, analysis: Semantic
) -> list[ast.expr] | None:
    """The tensor arguments of ``call`` when it computes one value per element: a loss
    with ``reduction="none"`` (function or module), or a function of this file that
    returns an elementwise expression of its parameters."""
    if any(type(a) is ast.Starred for a in call.args):
        return None
    name = analysis.call_name(call)
    if name is not None:
        head, _, short = name.rpartition(".")
        if head == "torch.nn.functional" and short in ELEMENTWISE_LOSSES:
            return call.args[:2] if _reduction_none(call) else None
        return None
    loss = loss_module_call(call.func, at, analysis)
    if loss is not None:
        return call.args[:2] if _reduction_none(loss) and not call.keywords else None
    function = analysis.local_function(call.func, at)
    if function is None or call.keywords or len(call.args) != len(function.args.args):
        return None
    if function.args.vararg or function.args.kwarg or function.args.kwonlyargs:
        return None
    if not _returns_elementwise(function, analysis):
        return None
    return [a for a in call.args if literal_number(a) is None]


def _reduction_none(call: ast.Call) -> bool:
    reduction = argument(call, "reduction", None)
    return type(reduction) is ast.Constant and reduction.value == "none"


def mean_squared_error(call: ast.Call, at: ast.AST, analysis: Semantic) -> list[ast.expr] | None:
    """The two inputs of ``call`` when it computes a mean squared error to one number:
    `F.mse_loss(a, b)` or a `nn.MSELoss()` module, with the default reduction."""
    if any(type(a) is ast.Starred for a in call.args) or len(call.args) < 2:
        return None
    constructor: ast.Call | None = call
    if analysis.call_name(call) != "torch.nn.functional.mse_loss":
        constructor = loss_module_call(call.func, at, analysis)
        name = analysis.call_name(constructor) if constructor is not None else None
        if name != "torch.nn.MSELoss" or call.keywords:
            return None
    assert constructor is not None
    reduction = argument(constructor, "reduction", None)
    if reduction is not None and not (
        type(reduction) is ast.Constant and reduction.value == "mean"
    ):
        return None
    return call.args[:2]


def loss_module_call(func: ast.expr, at: ast.AST, analysis: Semantic) -> ast.Call | None:
    """The constructor call of the loss module ``func`` names (`L = nn.MSELoss(...)`,
    then `L(x, t)`; `self.criterion = nn.MSELoss(...)`, then `self.criterion(x, t)`)."""
    values: list[ast.expr | None] = []
    if type(func) is ast.Name:
        binding = analysis.reaching_binding(func, at)
        if binding is not None and binding.kind == "assign" and binding.unpack_index is None:
            values = [binding.value]
    elif type(func) is ast.Attribute:
        values = [value for value, _ in analysis.self_attribute_values(func, at)]
    if len(values) != 1 or type(values[0]) is not ast.Call:
        return None
    constructor = values[0]
    name = analysis.call_name(constructor) or ""
    head, _, short = name.rpartition(".")
    return constructor if head == "torch.nn" and short in _LOSS_MODULES else None


def _returns_elementwise(function: ast.FunctionDef, analysis: Semantic) -> bool:
    """The function's body is `return <expr>` (after a docstring or comments), the
    expression built of its parameters, numbers and elementwise ops, non-linear in them
    (a `nan` in one input reaches the derivative for the others)."""
    body = [s for s in function.body if not (type(s) is ast.Expr and type(s.value) is ast.Constant)]
    if len(body) != 1 or type(body[0]) is not ast.Return or body[0].value is None:
        return False
    params = {a.arg for a in function.args.args}
    returned = body[0].value
    return _elementwise_of(returned, params, analysis) and _nonlinear(returned)


def _elementwise_of(expr: ast.expr, params: set[str], analysis: Semantic) -> bool:
    if type(expr) is ast.Name:
        return expr.id in params
    if literal_number(expr) is not None:
        return True
    if type(expr) is ast.BinOp:
        if type(expr.op) not in _ARITHMETIC:
            return False
        return _elementwise_of(expr.left, params, analysis) and _elementwise_of(
            expr.right, params, analysis
        )
    if type(expr) is ast.UnaryOp:
        return _elementwise_of(expr.operand, params, analysis)
    if type(expr) is ast.Call and not expr.keywords:
        name = analysis.call_name(expr)
        func = expr.func
        if name is not None:
            head, _, short = name.rpartition(".")
            if head != "torch" or short not in ELEMENTWISE_FUNCTIONS:
                return False
            return all(_elementwise_of(a, params, analysis) for a in expr.args)
        if type(func) is ast.Attribute and func.attr in ELEMENTWISE_FUNCTIONS:
            operands = [func.value, *expr.args]
            return all(_elementwise_of(a, params, analysis) for a in operands)
    return False


#: Elementwise functions whose derivative depends on the value (a `nan` there makes it
#: `nan`); `abs`, `relu`, `clamp` and sums back-propagate 0 through a `nan` instead.
_VALUE_DEPENDENT = frozenset(
    "square sqrt exp log log1p pow sigmoid tanh mul div multiply divide".split()
)


def _nonlinear(expr: ast.expr) -> bool:
    """Some operation whose derivative for one operand depends on another or on the
    value (not only `+`, `-`, negation, `abs`, `relu`, `clamp`)."""
    for node in ast.walk(expr):
        if type(node) is ast.BinOp and type(node.op) not in (ast.Add, ast.Sub):
            return True
        if type(node) is ast.Call:
            func = node.func
            name = func.attr if type(func) is ast.Attribute else None
            if name in _VALUE_DEPENDENT:
                return True
    return False


def mask_expression(found: SingularIndex) -> ast.expr:
    """The source of the bool mask the fix's guard tests, at the indexed value."""
    if found.condition_at_binding is not None:
        return found.condition_at_binding
    return selector_expression(found.mask.selector)
