"""``inplace`` flags set on modules after they were built (GF204).

``self.act.inplace = True``, ``setattr(m, "inplace", True)``, or a walk over a model's
modules that flips them all::

    for m in self.modules():
        if isinstance(m, (nn.ReLU, nn.Dropout)):
            m.inplace = True

After it, calling such a module changes its input in place, exactly as if it had been
built with ``inplace=True``. :func:`flag_sets` finds the statements; :func:`sets_flag_of`
tells whether one of them reaches the module a call runs.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from gradfix.semantic import Semantic, argument_values, is_true

#: Methods of ``nn.Module`` whose iteration yields its submodules (``named_*``: pairs).
_MODULE_WALKS = {"modules": None, "children": None, "named_modules": 1, "named_children": 1}


@dataclass(frozen=True)
class FlagSet:
    """A statement setting ``inplace`` to True on ``target`` (a module)."""

    statement: ast.stmt
    value: ast.expr  # the ``True`` the fix turns into ``False``
    target: ast.expr
    walk: ast.For | None  # ``for m in <model>.modules()`` binding ``target``
    classes: frozenset[str] | None  # ``nn`` classes an ``isinstance`` test keeps (None: all)
    model: ast.ClassDef | None  # the class of the model walked (None: unknown)


def flag_sets(analysis: Semantic) -> list[FlagSet]:
    """Every statement of the file that sets a module's ``inplace`` flag to True."""
    found = []
    for target in analysis.attributes_named("inplace"):  # the index: no walk of every node
        statement = analysis.parent(target)
        if type(statement) is not ast.Assign or statement.targets != [target]:
            continue
        if is_true(statement.value):
            found.append(_flag_set(analysis, statement, statement.value, target.value))
    calls = {id(call): call for call in analysis.calls_named("setattr")}
    for call in sorted(calls.values(), key=analysis.index):
        values = argument_values(call)
        if type(call.func) is not ast.Name or call.func.id != "setattr" or len(values) != 3:
            continue
        name, value = values[1], values[2]
        statement = analysis.parent(call)
        if type(name) is ast.Constant and name.value == "inplace" and is_true(value):
            if type(statement) is ast.Expr:
                found.append(_flag_set(analysis, statement, value, values[0]))
    return found


def _flag_set(
    analysis: Semantic, statement: ast.stmt, value: ast.expr, target: ast.expr
) -> FlagSet:
    walk = _walk_binding(analysis, target, statement)
    if walk is None or type(target) is not ast.Name:
        return FlagSet(statement, value, target, None, None, None)
    classes = _isinstance_classes(analysis, target, statement, walk)
    model = _walked_model(analysis, walk)
    return FlagSet(statement, value, target, walk, classes, model)


def _walk_binding(analysis: Semantic, target: ast.expr, at: ast.AST) -> ast.For | None:
    """The ``for m in model.modules()`` loop that binds the name ``target``."""
    if type(target) is not ast.Name:
        return None
    binding = analysis.reaching_binding(target, at)
    loop = binding.node if binding is not None and binding.kind == "for" else None
    if type(loop) is not ast.For or type(loop.iter) is not ast.Call:
        return None
    func = loop.iter.func
    if type(func) is not ast.Attribute or func.attr not in _MODULE_WALKS:
        return None
    if binding is not None and binding.unpack_index != _MODULE_WALKS[func.attr]:
        return None
    return loop


def _isinstance_classes(
    analysis: Semantic, target: ast.Name, statement: ast.stmt, walk: ast.For
) -> frozenset[str] | None:
    """The ``nn`` classes the ``if`` tests between the loop and the statement keep
    (``isinstance(m, (nn.ReLU, nn.Dropout))``, ``or`` of those); None when no test is an
    ``isinstance`` of ``target``."""
    kept: set[str] | None = None
    for ancestor in analysis.ancestors(statement):
        if ancestor is walk:
            break
        if type(ancestor) is not ast.If:
            continue
        for call in ast.walk(ancestor.test):
            if type(call) is not ast.Call or type(call.func) is not ast.Name:
                continue
            if call.func.id != "isinstance" or len(call.args) != 2:
                continue
            first, classes = call.args
            if type(first) is not ast.Name or first.id != target.id:
                continue
            listed = classes.elts if type(classes) is ast.Tuple else [classes]
            names = {(analysis.qualified_name(c) or "").rpartition(".")[2] for c in listed}
            kept = names if kept is None else kept | names
    return frozenset(kept) if kept is not None else None


def _walked_model(analysis: Semantic, walk: ast.For) -> ast.ClassDef | None:
    """The class of the model ``walk`` iterates: the enclosing class for ``self``, the
    class a name was built from (``model = Net()``)."""
    owner = walk.iter.func.value  # type: ignore[attr-defined]
    if analysis.is_self(owner, walk):
        return analysis.enclosing_class(walk)
    if type(owner) is not ast.Name:
        return None
    binding = analysis.reaching_binding(owner, walk)
    value = binding.value if binding is not None and binding.kind == "assign" else None
    return _class_of(analysis, value.func) if type(value) is ast.Call else None


def _class_of(analysis: Semantic, func: ast.expr) -> ast.ClassDef | None:
    if type(func) is not ast.Name:
        return None
    bindings = analysis.bindings(func)
    if len(bindings) != 1 or type(bindings[0].node) is not ast.ClassDef:
        return None
    return bindings[0].node


def sets_flag_of(
    analysis: Semantic, flag: FlagSet, func: ast.expr, at: ast.AST, module_class: str
) -> bool:
    """``flag`` sets ``inplace`` on the module ``func`` names (an ``nn.<module_class>``)."""
    if flag.walk is None:
        return _same_module(analysis, flag, func, at)
    if flag.classes is not None and module_class not in flag.classes:
        return False
    if flag.model is None:
        return True
    caller = analysis.enclosing_class(at)
    return caller is not None and caller in _built_classes(analysis, flag.model)


def _same_module(analysis: Semantic, flag: FlagSet, func: ast.expr, at: ast.AST) -> bool:
    """``self.act.inplace = True`` and ``self.act(...)`` in the same class, or a name
    with the same binding."""
    target = flag.target
    if type(target) is ast.Attribute and type(func) is ast.Attribute:
        same_class = analysis.enclosing_class(flag.statement) is analysis.enclosing_class(at)
        selves = analysis.is_self(target.value, flag.statement) and analysis.is_self(func.value, at)
        return target.attr == func.attr and same_class and selves
    if type(target) is ast.Name and type(func) is ast.Name and target.id == func.id:
        before = analysis.reaching_binding(target, flag.statement)
        return before is not None and before is analysis.reaching_binding(func, at)
    return False


def _built_classes(analysis: Semantic, model: ast.ClassDef) -> set[ast.ClassDef]:
    """``model`` and the classes of this file it builds, transitively (its submodules)."""
    found = {model}
    pending = [model]
    while pending and len(found) < 64:
        cls = pending.pop()
        for node in ast.walk(cls):
            built = _class_of(analysis, node.func) if type(node) is ast.Call else None
            if built is not None and built not in found:
                found.add(built)
                pending.append(built)
    return found
