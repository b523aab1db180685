"""In-place changes and aliasing: what GF204 and GF206 ask about a tensor name.

An in-place op (``h += 1``, ``h.mul_(2)``, ``h[0] = v``, ``F.relu(h, inplace=True)``)
changes the tensor every alias of ``h`` sees: views (``h[0]``, ``h.view(...)``, ``h.t()``,
``h.detach()``), other names bound to it, containers holding it. Rewriting the change
out of place (``h = h + 1``) rebinds only ``h``, so it keeps forward results only when no
alias is read afterwards. :func:`classify_read` tells how one read of a name uses the
tensor, which is what both rules build on.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import libcst as cst

from gradfix.analysis import (
    TENSOR_OPS,
    VIEW_ATTRIBUTES,
    Binding,
    FileAnalysis,
    VariableNames,
    is_number_literal,
)
from gradfix.torch_facts import (
    AUGMENTED_ASSIGNMENTS,
    INPLACE_FLAG_POSITIONS,
    MAY_ALIAS_OPS,
    NON_GRAPH_ATTRIBUTES,
    NON_GRAPH_CALLS,
    is_inplace_method,
)
from gradfix.walk import walk


def changes_in_place(node: cst.AugAssign) -> bool:
    """``h += 1`` changes the tensor ``h`` in place; ``h @= m`` rebinds ``h``."""
    return cst.Module([]).code_for_node(node.operator).strip() in AUGMENTED_ASSIGNMENTS


def small_statement(analysis: FileAnalysis, node: cst.CSTNode) -> cst.BaseSmallStatement | None:
    """The simple statement ``node`` belongs to (None inside a compound header or lambda)."""
    for ancestor in analysis.ancestors(node):
        if isinstance(ancestor, cst.BaseSmallStatement):
            return ancestor
        if isinstance(ancestor, (cst.BaseCompoundStatement, cst.Lambda)):
            return None
    return None


def is_inplace_call(expr: cst.BaseExpression) -> bool:
    """``h.mul_(2)``: a call of an in-place tensor method."""
    return (
        isinstance(expr, cst.Call)
        and isinstance(expr.func, cst.Attribute)
        and is_inplace_method(expr.func.attr.value)
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

    name: cst.Name
    kind: str
    top: cst.BaseExpression
    aliases: list[cst.Name] = field(default_factory=list)
    method: str | None = None  # the in-place method of a mutation


def classify_read(analysis: FileAnalysis, name: cst.Name) -> Read:
    """How the expression around ``name`` uses the tensor it holds."""
    node: cst.BaseExpression = name
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
    analysis: FileAnalysis, node: cst.BaseExpression, parent: cst.CSTNode | None
) -> cst.BaseExpression | tuple[str, str | None] | None:
    """The view of ``node`` that ``parent`` makes (climb on), a final ``(kind, method)``,
    or None when ``parent`` is not an attribute or subscript of ``node``."""
    if isinstance(parent, cst.Subscript) and parent.value is node:
        return parent
    if not isinstance(parent, cst.Attribute) or parent.value is not node:
        return None
    attr = parent.attr.value
    if attr in VIEW_ATTRIBUTES:
        return parent
    if attr == "data":
        return ("nongraph", None)  # not version-checked: see GF205
    call = analysis.parent(parent)
    is_call = isinstance(call, cst.Call) and call.func is parent
    if attr in NON_GRAPH_ATTRIBUTES:
        return ("nongraph", None)
    if is_call and is_inplace_method(attr):
        return ("mutation", attr)
    if is_call and attr in MAY_ALIAS_OPS:
        assert isinstance(call, cst.Call)
        return call
    if is_call and attr in TENSOR_OPS:
        return ("fresh", None)
    return ("escape", None)


def _use(
    analysis: FileAnalysis, name: cst.Name, top: cst.BaseExpression, parent: cst.CSTNode | None
) -> Read:
    """Classify the use of ``top`` (the outermost view of ``name``) by ``parent``."""
    if isinstance(parent, (cst.BinaryOperation, cst.UnaryOperation)):
        return Read(name, "fresh", top)
    if isinstance(parent, (cst.Comparison, cst.ComparisonTarget)):
        return Read(name, "nongraph", top)  # a bool tensor: no gradient flows
    if isinstance(parent, cst.AugAssign) and parent.target is top:
        return Read(name, "mutation" if changes_in_place(parent) else "fresh", top)
    if isinstance(parent, cst.AssignTarget):
        return Read(name, "mutation" if top is not name else "nongraph", top)
    if isinstance(parent, cst.Assign) and parent.value is top:
        targets = [t.target for t in parent.targets]
        if all(isinstance(t, cst.Name) for t in targets):
            return Read(name, "alias", top, [t for t in targets if isinstance(t, cst.Name)])
        return Read(name, "escape", top)
    if isinstance(parent, cst.Arg):
        return _argument_use(analysis, name, top, parent)
    if isinstance(parent, (cst.If, cst.While, cst.Assert, cst.IfExp)) and parent.test is top:
        return Read(name, "nongraph", top)
    if isinstance(parent, cst.Expr):
        return Read(name, "nongraph", top)
    return Read(name, "escape", top)


def _argument_use(
    analysis: FileAnalysis, name: cst.Name, top: cst.BaseExpression, arg: cst.Arg
) -> Read:
    call = analysis.parent(arg)
    if not isinstance(call, cst.Call):
        return Read(name, "escape", top)
    func = call.func
    if isinstance(func, cst.Name) and func.value in NON_GRAPH_CALLS:
        return Read(name, "nongraph", top)
    if inplace_function(analysis, call) is not None and call.args and call.args[0] is arg:
        return Read(name, "mutation", top, method="inplace function")
    if analysis.is_nn_layer(func, call):
        return Read(name, "fresh", top)
    qualified = analysis.call_name(call)
    if qualified is not None and qualified.startswith("torch."):
        short = qualified.rpartition(".")[2]
        if short in TENSOR_OPS and short not in MAY_ALIAS_OPS:
            return Read(name, "fresh", top)
    return Read(name, "escape", top)


def inplace_function(analysis: FileAnalysis, call: cst.Call) -> str | None:
    """The out-of-place name of a torch function call that changes its first argument:
    ``F.relu_(x)`` / ``torch.sigmoid_(x)`` -> ``"relu"`` / ``"sigmoid"``,
    ``F.relu(x, inplace=True)`` -> ``"relu"``; None otherwise."""
    qualified = analysis.call_name(call) or ""
    namespace, _, short = qualified.rpartition(".")
    if namespace not in ("torch", "torch.nn.functional") or not call.args:
        return None
    if is_inplace_method(short):
        return short[:-1]
    position = INPLACE_FLAG_POSITIONS.get(short)
    if position is None or namespace != "torch.nn.functional":
        return None
    flag = inplace_flag(call, position)
    return short if flag is not None and _is_true(flag.value) else None


def inplace_flag(call: cst.Call, position: int) -> cst.Arg | None:
    """The ``inplace=`` argument of ``call`` (by keyword or at ``position``)."""
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == "inplace":
            return arg
    positional = [a for a in call.args if a.keyword is None and not a.star]
    return positional[position] if len(positional) > position else None


def _is_true(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.Name) and expr.value == "True"


# -- names -------------------------------------------------------------------------------------
class _VariableNames(VariableNames):
    """Every ``Name`` used as a variable (not ``.attr`` or ``keyword=``)."""

    def visit_Param(self, node: cst.Param) -> bool:
        if node.default is not None:
            walk(node.default, self)
        return False

    def visit_ImportAlias(self, node: cst.ImportAlias) -> bool:
        return False


def variable_names(node: cst.CSTNode) -> list[cst.Name]:
    collector = _VariableNames()
    walk(node, collector)
    return collector.names


class NameIndex:
    """The variable names of each scope, collected once: ``all(scope)`` in source order,
    ``named(scope, "h")`` only those spelled ``h``."""

    def __init__(self) -> None:
        self._all: dict[int, list[cst.Name]] = {}
        self._by_spelling: dict[int, dict[str, list[cst.Name]]] = {}

    def all(self, scope: cst.CSTNode) -> list[cst.Name]:
        key = id(scope)
        if key not in self._all:
            self._all[key] = variable_names(scope)
            table: dict[str, list[cst.Name]] = {}
            for name in self._all[key]:
                table.setdefault(name.value, []).append(name)
            self._by_spelling[key] = table
        return self._all[key]

    def named(self, scope: cst.CSTNode, spelling: str) -> list[cst.Name]:
        self.all(scope)
        return self._by_spelling[id(scope)].get(spelling, [])


def reads_of(
    analysis: FileAnalysis,
    names: NameIndex,
    binding: Binding,
    scope: cst.CSTNode,
    start: int,
    end: int,
) -> Iterator[cst.Name]:
    """Reads of ``binding``'s name in ``scope`` between pre-order indices ``start`` and
    ``end`` (exclusive) that see ``binding``."""
    for name in names.named(scope, binding.name):
        position = analysis.index(name)
        if not start < position < end or _is_store(analysis, name):
            continue
        if analysis.reaching_binding(name, name) is binding:
            yield name


def _is_store(analysis: FileAnalysis, name: cst.Name) -> bool:
    parent = analysis.parent(name)
    if isinstance(parent, cst.AssignTarget) and parent.target is name:
        return True
    if isinstance(parent, (cst.For, cst.CompFor)) and parent.target is name:
        return True
    if isinstance(parent, (cst.Element, cst.StarredElement)):
        grand = analysis.parent(parent)
        return isinstance(grand, (cst.Tuple, cst.List)) and isinstance(
            analysis.parent(grand), (cst.AssignTarget, cst.For, cst.CompFor)
        )
    return isinstance(parent, (cst.AnnAssign, cst.NamedExpr)) and parent.target is name


def is_constant(analysis: FileAnalysis, expr: cst.BaseExpression) -> bool:
    """A Python number, bool, None or string literal, arithmetic of those, or a name
    bound only to a number (``eps = 1e-6``, ``def f(x, eps=1e-6)``)."""
    if is_number_literal(expr) or isinstance(expr, (cst.SimpleString, cst.ConcatenatedString)):
        return True
    if isinstance(expr, cst.BinaryOperation):
        return is_constant(analysis, expr.left) and is_constant(analysis, expr.right)
    if isinstance(expr, cst.Name):
        if expr.value in ("True", "False", "None"):
            return True
        binding = analysis.reaching_binding(expr, expr)
        if binding is None or binding.unpack_index is not None:
            return False
        if binding.kind == "assign" and binding.value is not None:
            return is_number_literal(binding.value)
        if binding.kind == "param" and isinstance(binding.node, cst.Param):
            default = binding.node.default
            annotation = binding.annotation
            numeric = annotation is None or (
                isinstance(annotation, cst.Name) and annotation.value in ("float", "int")
            )
            return default is not None and is_number_literal(default) and numeric
    return False


def in_eval_only_branch(analysis: FileAnalysis, node: cst.CSTNode) -> bool:
    """``node`` runs only when a module is not training: the body of
    ``if not self.training:`` or the ``else`` of ``if self.training:``."""
    child: cst.CSTNode = node
    for ancestor in analysis.ancestors(node):
        if isinstance(ancestor, cst.If):
            test = ancestor.test
            negated = isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not)
            inner = test.expression if isinstance(test, cst.UnaryOperation) else test
            is_training = isinstance(inner, cst.Attribute) and inner.attr.value == "training"
            in_body = child is ancestor.body
            if is_training and negated == in_body:
                return True
        child = ancestor
    return False


def in_autograd_function(analysis: FileAnalysis, node: cst.CSTNode) -> bool:
    """``node`` is inside ``forward``/``backward`` of a ``torch.autograd.Function``
    subclass, where autograd records nothing."""
    func = analysis.enclosing_function(node)
    cls = analysis.method_class(func) if func is not None else None
    if func is None or cls is None or func.name.value not in ("forward", "backward"):
        return False
    return any(
        analysis.qualified_name(base.value)
        in ("torch.autograd.Function", "torch.autograd.function.Function")
        for base in cls.bases
    )
