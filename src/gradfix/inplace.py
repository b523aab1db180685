"""In-place changes and aliasing: what GF204 and GF206 ask about a tensor name.

An in-place op (``h += 1``, ``h.mul_(2)``, ``h[0] = v``, ``F.relu(h, inplace=True)``)
changes the tensor every alias of ``h`` sees: views (``h[0]``, ``h.view(...)``, ``h.t()``,
``h.detach()``), other names bound to it, containers holding it. Rewriting the change
out of place (``h = h + 1``) rebinds only ``h``, so it keeps forward results only when no
alias is read afterwards. :func:`classify_read` tells how one read of a name uses the
tensor, which is what both rules build on. Everything here is on Python's ``ast`` (the
rules decide on it); :func:`changes_in_place` also answers for a LibCST ``AugAssign``,
for the rules that still decide on LibCST.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

import libcst as cst

from gradfix.semantic import (
    TENSOR_OPS,
    VIEW_ATTRIBUTES,
    Binding,
    Semantic,
    VariableNames,
    argument_node,
    argument_value,
    is_number_literal,
    is_true,
)
from gradfix.semantic.syntax import parameter_defaults, source_children
from gradfix.torch_facts import (
    AUGMENTED_ASSIGNMENTS,
    INPLACE_FLAG_POSITIONS,
    MAY_ALIAS_OPS,
    NON_GRAPH_ATTRIBUTES,
    NON_GRAPH_CALLS,
    canonical_spellings,
    is_inplace_method,
)

#: The symbol of each augmented assignment operator (``ast.Add`` -> ``+=``).
AUGMENTED_SYMBOLS: dict[type[ast.operator], str] = {
    ast.Add: "+=", ast.Sub: "-=", ast.Mult: "*=", ast.Div: "/=", ast.FloorDiv: "//=",
    ast.Mod: "%=", ast.Pow: "**=", ast.BitAnd: "&=", ast.BitOr: "|=", ast.BitXor: "^=",
    ast.LShift: "<<=", ast.RShift: ">>=", ast.MatMult: "@=",
}  # fmt: skip
#: Line ends as ``ast`` counts lines.
_NEWLINE = re.compile(rb"\r\n|\r|\n")
#: Python floats of the standard library and numpy (``x *= 2 * math.pi`` keeps the dtype).
MATH_CONSTANTS = frozenset(
    f"{module}.{name}" for module in ("math", "numpy") for name in ("pi", "e", "tau", "inf")
)
#: Statements that hold a block of statements (LibCST's ``BaseCompoundStatement``).
_COMPOUND = (
    ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try,
    ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Match,
    *((ast.TryStar,) if hasattr(ast, "TryStar") else ()),
)  # fmt: skip


def changes_in_place(node: ast.AugAssign | cst.AugAssign) -> bool:
    """``h += 1`` changes the tensor ``h`` in place; ``h @= m`` rebinds ``h``."""
    if isinstance(node, ast.AugAssign):
        return AUGMENTED_SYMBOLS.get(type(node.op)) in AUGMENTED_ASSIGNMENTS
    return cst.Module([]).code_for_node(node.operator).strip() in AUGMENTED_ASSIGNMENTS


def small_statement(analysis: Semantic, node: ast.AST) -> ast.stmt | None:
    """The simple statement ``node`` belongs to (None inside a compound header or lambda)."""
    for ancestor in analysis.ancestors(node):
        if isinstance(ancestor, (*_COMPOUND, ast.Lambda)):
            return None
        if isinstance(ancestor, ast.stmt):
            return ancestor
    return None


def source_arguments(call: ast.Call) -> list[ast.AST]:
    """The arguments of ``call`` in the order of the source (LibCST's ``call.args``)."""
    return source_children(call)[1:]


def first_argument(call: ast.Call) -> ast.expr | None:
    """What the first argument in the source passes (``h`` of ``f(h, ...)``, ``f(x=h)``)."""
    args, keywords = call.args, call.keywords
    if not keywords:
        return argument_value(args[0]) if args else None
    if not args:
        return keywords[0].value
    first_keyword, first_arg = keywords[0], args[0]  # ``f(a=1, *b)``: a keyword may come first
    if (first_keyword.lineno, first_keyword.col_offset) < (first_arg.lineno, first_arg.col_offset):
        return first_keyword.value
    return argument_value(first_arg)


def code_with_parentheses(source: str, node: ast.AST) -> str:
    """The text of ``node`` with the parentheses around it, as LibCST prints the node
    (its ``lpar``/``rpar`` are part of it): ``(w[:4])`` for the value of ``a = (w[:4])``.
    Only for a node that starts its expression (a statement's value, the base of a chain)."""
    data = source.encode("utf-8")
    starts = [0, *(match.end() for match in _NEWLINE.finditer(data))]
    start = starts[node.lineno - 1] + node.col_offset  # type: ignore[attr-defined]
    end = starts[node.end_lineno - 1] + node.end_col_offset  # type: ignore[attr-defined]
    while True:
        before, after = data[:start].rstrip(), data[end:].lstrip()
        if not (before.endswith(b"(") and after.startswith(b")")):
            return data[start:end].decode("utf-8", errors="replace")
        start, end = len(before) - 1, len(data) - len(after) + 1


def is_inplace_call(expr: ast.expr) -> bool:
    """``h.mul_(2)``: a call of an in-place tensor method."""
    return (
        type(expr) is ast.Call
        and type(expr.func) is ast.Attribute
        and is_inplace_method(expr.func.attr)
    )


@dataclass
class Read:
    """How one read of a tensor name uses the tensor.

    ``kind``: ``"fresh"`` (an operand of an op that makes a new tensor), ``"nongraph"``
    (``h.shape``, ``print(h)``), ``"mutation"`` (``h.add_(1)``, ``h[0] = v``, ``h += 1``,
    also through a view: ``h[0].zero_()``), ``"alias"`` (a name is bound to the tensor or a
    view of it: ``aliases``) or ``"escape"`` (passed to unknown code, stored in a
    container or attribute, returned).
    ``top`` is the outermost view of the read (``h[0].t()`` for ``h``): the operand an op
    sees.
    """

    name: ast.Name
    kind: str
    top: ast.expr
    aliases: list[ast.Name] = field(default_factory=list)
    method: str | None = None  # the in-place method of a mutation


def classify_read(analysis: Semantic, name: ast.Name) -> Read:
    """How the expression around ``name`` uses the tensor it holds."""
    node: ast.expr = name
    while True:
        parent = analysis.parent(node)
        step = _view_step(analysis, node, parent)
        if step is None:
            return _use(analysis, name, node, parent)
        if isinstance(step, tuple):
            kind, method = step
            return Read(name, kind, node, method=method)
        node = step


def _view_step(
    analysis: Semantic, node: ast.expr, parent: ast.AST | None
) -> ast.expr | tuple[str, str | None] | None:
    """The view of ``node`` that ``parent`` makes (climb on), a final ``(kind, method)``,
    or None when ``parent`` is not an attribute or subscript of ``node``."""
    if type(parent) is ast.Subscript and parent.value is node:
        return parent
    if type(parent) is not ast.Attribute or parent.value is not node:
        return None
    attr = parent.attr
    if attr in VIEW_ATTRIBUTES:
        return parent
    if attr == "data":
        return ("nongraph", None)  # not version-checked: see GF205
    call = analysis.parent(parent)
    is_call = type(call) is ast.Call and call.func is parent
    if attr in NON_GRAPH_ATTRIBUTES:
        return ("nongraph", None)
    if is_call and is_inplace_method(attr):
        return ("mutation", attr)
    if is_call and attr in MAY_ALIAS_OPS:
        assert isinstance(call, ast.Call)
        return call
    if is_call and attr in TENSOR_OPS:
        return ("fresh", None)
    return ("escape", None)


def call_of_argument(analysis: Semantic, top: ast.expr) -> tuple[ast.Call, ast.AST] | None:
    """The call ``top`` is passed to, with its argument (LibCST's ``Arg``: ``top`` itself,
    its ``ast.keyword`` or its ``ast.Starred``); None when ``top`` is not an argument."""
    parent = analysis.parent(top)
    if type(parent) is ast.keyword or type(parent) is ast.Starred:
        call = analysis.parent(parent)
        if type(call) is ast.Call and call.func is not parent:
            return call, parent
        return None
    if type(parent) is ast.Call and parent.func is not top:
        return parent, top
    return None


def _use(analysis: Semantic, name: ast.Name, top: ast.expr, parent: ast.AST | None) -> Read:
    """Classify the use of ``top`` (the outermost view of ``name``) by ``parent``."""
    kind = type(parent)
    if kind is ast.BinOp or kind is ast.UnaryOp:
        return Read(name, "fresh", top)
    if kind is ast.Compare:
        return Read(name, "nongraph", top)  # a bool tensor: no gradient flows
    if kind is ast.AugAssign and parent.target is top:  # type: ignore[union-attr]
        in_place = changes_in_place(parent)  # type: ignore[arg-type]
        return Read(name, "mutation" if in_place else "fresh", top)
    if kind is ast.Assign and any(t is top for t in parent.targets):  # type: ignore[union-attr]
        return Read(name, "mutation" if top is not name else "nongraph", top)
    if kind is ast.Assign and parent.value is top:  # type: ignore[union-attr]
        targets = parent.targets  # type: ignore[union-attr]
        if all(type(t) is ast.Name for t in targets):
            return Read(name, "alias", top, [t for t in targets if isinstance(t, ast.Name)])
        return Read(name, "escape", top)
    argument = call_of_argument(analysis, top)
    if argument is not None:
        return _argument_use(analysis, name, top, *argument)
    if kind in (ast.If, ast.While, ast.Assert, ast.IfExp) and parent.test is top:  # type: ignore[union-attr]
        return Read(name, "nongraph", top)
    if kind is ast.Expr:
        return Read(name, "nongraph", top)
    return Read(name, "escape", top)


def _argument_use(
    analysis: Semantic, name: ast.Name, top: ast.expr, call: ast.Call, arg: ast.AST
) -> Read:
    func = call.func
    if type(func) is ast.Name and func.id in NON_GRAPH_CALLS:
        return Read(name, "nongraph", top)
    if inplace_function(analysis, call) is not None and source_arguments(call)[0] is arg:
        return Read(name, "mutation", top, method="inplace function")
    if analysis.is_nn_layer(func, call):
        return Read(name, "fresh", top)
    qualified = analysis.call_name(call)
    if qualified is not None and qualified.startswith("torch."):
        short = qualified.rpartition(".")[2]
        if short in TENSOR_OPS and short not in MAY_ALIAS_OPS:
            return Read(name, "fresh", top)
    return Read(name, "escape", top)


#: The last names of the torch functions :func:`inplace_function` answers for besides
#: ``*_``: the functional ops with an ``inplace`` flag, and every name that stands for one
#: of them or for an in-place function (``CANONICAL``)
INPLACE_CALL_NAMES = frozenset(INPLACE_FLAG_POSITIONS) | canonical_spellings(
    lambda short: short in INPLACE_FLAG_POSITIONS or short.endswith("_")
)


def spelled_inplace(analysis: Semantic, func: ast.expr, also: frozenset[str] = frozenset()) -> bool:
    """A call of ``func`` may change a tensor in place, by the name it is spelled or
    imported as: ``x.add_(1)``, ``F.relu(x, inplace=True)``, ``from torch import relu_ as
    r``, or a name in ``also``. True for a callee that is no name (``fns[0](x)``). A cheap
    first question: :func:`inplace_function` and in-place methods need it."""
    if type(func) is ast.Attribute:
        spelled = func.attr  # type: ignore[attr-defined]
    elif type(func) is ast.Name:
        spelled = func.id  # type: ignore[attr-defined]
    else:
        return True
    return inplace_spelling(spelled, analysis.call_aliases().get(spelled, ()), also)


def inplace_spelling(spelled: str, aliased: tuple[str, ...], also: frozenset[str]) -> bool:
    """:func:`spelled_inplace` of a call spelled ``spelled`` (``""``: a callee that is no
    name), a name an import binds to ``aliased`` (``from torch import relu_ as r``): what a
    rule's ``takes_call`` answers the walk (:attr:`gradfix.rule.Rule.calls`)."""
    if not spelled or spelled.endswith("_") or spelled in INPLACE_CALL_NAMES or spelled in also:
        return True
    return any(name.endswith("_") or name in INPLACE_CALL_NAMES or name in also for name in aliased)


def inplace_function(analysis: Semantic, call: ast.Call) -> str | None:
    """The out-of-place name of a torch function call that changes its first argument:
    ``F.relu_(x)`` / ``torch.sigmoid_(x)`` -> ``"relu"`` / ``"sigmoid"``,
    ``F.relu(x, inplace=True)`` -> ``"relu"``; None otherwise."""
    qualified = analysis.call_name(call) or ""
    namespace, _, short = qualified.rpartition(".")
    if namespace not in ("torch", "torch.nn.functional") or not (call.args or call.keywords):
        return None
    if is_inplace_method(short):
        return short[:-1]
    position = INPLACE_FLAG_POSITIONS.get(short)
    if position is None or namespace != "torch.nn.functional":
        return None
    flag = argument_node(call, "inplace", position)
    return short if flag is not None and is_true(argument_value(flag)) else None


# -- names -------------------------------------------------------------------------------------
class NameIndex:
    """The variable names of each scope, collected once: ``all(scope)`` in source order,
    ``named(scope, "h")`` only those spelled ``h`` (from the analysis' index)."""

    def __init__(self, analysis: Semantic) -> None:
        self.analysis = analysis
        self._all: dict[ast.AST, list[ast.Name]] = {}

    def all(self, scope: ast.AST) -> list[ast.Name]:
        if scope not in self._all:
            collector = VariableNames()
            collector.visit(scope)
            self._all[scope] = collector.names
        return self._all[scope]

    def named(self, scope: ast.AST, spelling: str) -> list[ast.Name]:
        return self.analysis.name_nodes_in(scope, spelling)


def reads_of(
    analysis: Semantic,
    names: NameIndex,
    binding: Binding,
    scope: ast.AST,
    start: int,
    end: int,
) -> Iterator[ast.Name]:
    """Reads of ``binding``'s name in ``scope`` between pre-order indices ``start`` and
    ``end`` (exclusive) that see ``binding``."""
    for name in names.named(scope, binding.name):
        position = analysis.index(name)
        if not start < position < end or _is_store(analysis, name):
            continue
        if analysis.reaching_binding(name, name) is binding:
            yield name


def _is_target(analysis: Semantic, node: ast.AST) -> bool:
    """``node`` is a whole target of an assignment or a ``for`` (LibCST's ``AssignTarget``,
    ``For.target``, ``CompFor.target``)."""
    parent = analysis.parent(node)
    if type(parent) is ast.Assign:
        return any(t is node for t in parent.targets)
    loops = (ast.For, ast.AsyncFor, ast.comprehension)
    return isinstance(parent, loops) and parent.target is node  # type: ignore[union-attr]


def _is_store(analysis: Semantic, name: ast.Name) -> bool:
    """``name`` is bound here: a target, an element of a target tuple/list (not deeper),
    the target of an annotated assignment or of ``:=`` (``h += 1`` is a read)."""
    if _is_target(analysis, name):
        return True
    parent = analysis.parent(name)
    if type(parent) is ast.Starred:
        parent = analysis.parent(parent)
    if type(parent) is ast.Tuple or type(parent) is ast.List:
        return _is_target(analysis, parent)
    kind = type(parent)
    return (kind is ast.AnnAssign or kind is ast.NamedExpr) and parent.target is name  # type: ignore[union-attr]


def _is_constant_literal(expr: ast.expr) -> bool:
    """A number, string or bytes literal, ``True``, ``False`` or ``None`` (not ``...``)."""
    if is_number_literal(expr):
        return True
    if type(expr) is not ast.Constant:
        return False
    value = expr.value
    return type(value) in (str, bytes) or value is True or value is False or value is None


def is_constant(analysis: Semantic, expr: ast.expr) -> bool:
    """A Python number, bool, None or string literal, arithmetic of those, a name bound
    only to a number (``eps = 1e-6``, ``def f(x, eps=1e-6)``), or ``math.pi``."""
    if _is_constant_literal(expr):
        return True
    if type(expr) is ast.BinOp:
        return is_constant(analysis, expr.left) and is_constant(analysis, expr.right)
    if type(expr) is ast.Attribute:
        return analysis.qualified_name(expr) in MATH_CONSTANTS
    if type(expr) is ast.Name:
        binding = analysis.reaching_binding(expr, expr)
        if binding is None or binding.unpack_index is not None:
            return False
        if binding.kind == "assign" and binding.value is not None:
            return is_number_literal(binding.value)
        if binding.kind == "param" and type(binding.node) is ast.arg:
            default = _default(analysis, binding.node)
            annotation = binding.annotation
            numeric = annotation is None or (
                type(annotation) is ast.Name and annotation.id in ("float", "int")
            )
            return default is not None and is_number_literal(default) and numeric
    return False


def _default(analysis: Semantic, param: ast.arg) -> ast.expr | None:
    signature = analysis.parent(param)
    if type(signature) is not ast.arguments:
        return None
    return next((d for a, d in parameter_defaults(signature) if a is param), None)


def in_eval_only_branch(analysis: Semantic, node: ast.AST) -> bool:
    """``node`` runs only when a module is not training: the body of
    ``if not self.training:`` or the ``else`` of ``if self.training:``."""
    child: ast.AST = node
    for ancestor in analysis.ancestors(node):
        if type(ancestor) is ast.If:
            test = ancestor.test
            negated = type(test) is ast.UnaryOp and type(test.op) is ast.Not
            inner = test.operand if type(test) is ast.UnaryOp else test
            is_training = type(inner) is ast.Attribute and inner.attr == "training"
            in_body = any(statement is child for statement in ancestor.body)
            if is_training and negated == in_body:
                return True
        child = ancestor
    return False


def in_autograd_function(analysis: Semantic, node: ast.AST) -> bool:
    """``node`` is inside ``forward``/``backward`` of a ``torch.autograd.Function``
    subclass, where autograd records nothing."""
    func = analysis.enclosing_function(node)
    cls = analysis.method_class(func) if func is not None else None
    if func is None or cls is None or func.name not in ("forward", "backward"):
        return False
    return any(
        analysis.qualified_name(base)
        in ("torch.autograd.Function", "torch.autograd.function.Function")
        for base in cls.bases
    )
