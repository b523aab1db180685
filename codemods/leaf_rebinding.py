"""GF102 leaf-rebinding."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from gradfix.edits import Editor
from gradfix.rule import Edit, FixAvailability, FixSafety, Invalid, Rule, Valid
from gradfix.semantic import VIEW_ATTRIBUTES, VIEW_OPS, Binding, LeafReason, Scope, VariableNames
from gradfix.torch_facts import AUGMENTED_ASSIGNMENTS

#: Attributes whose read means the leaf itself: its gradient.
LEAF_ATTRIBUTES = frozenset({"grad"})
#: Attributes read to update a tensor in place under ``no_grad`` (``w.data -= ...``).
UPDATE_ATTRIBUTES = frozenset({"data"})
#: Suffix of the new name, by the op that derives the value (``eta * 2`` -> ``eta_scaled``).
BINARY_SUFFIXES: dict[type[ast.operator], str] = {
    ast.Mult: "scaled",
    ast.Div: "scaled",
    ast.Add: "shifted",
    ast.Sub: "shifted",
    ast.Pow: "pow",
    ast.MatMult: "matmul",
}
_LOOPS = (ast.For, ast.AsyncFor, ast.While)
_NESTED_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
#: Where a read may sit inside an optimizer's arguments (``SGD([w], ...)``, ``[{"params": w}]``).
_OPTIMIZER_ARGUMENT_PARTS = (ast.List, ast.Tuple, ast.Dict, ast.keyword, ast.Starred)


@dataclass
class Reads:
    """The uses of the name after the rebinding, up to the next binding of the name."""

    derived: list[ast.Name] = field(default_factory=list)  # meant the derived value
    targets: list[ast.Name] = field(default_factory=list)  # later ``name = f(name)``
    unsafe: str | None = None  # why renaming them could change behaviour


class LeafRebinding(Rule):
    """
    ## What it does
    Finds a name that holds a leaf tensor that requires grad (created on that name with
    `nn.Parameter(...)`, a factory with `requires_grad=True` or `.requires_grad_()`) and is
    rebound to an expression of itself: `eta = eta * 2`, `w = w.t()`, `x = x.view(3, 4)`.
    The fix binds the derived value to a new name and renames the later reads that use it.

    ## Why is this bad?
    After `eta = eta * 2` the name holds the *result* of an op, not the leaf. The leaf
    still gets its gradient, but nothing refers to it any more: `eta.grad` is `None` (with
    the warning "The .grad attribute of a Tensor that is not a leaf Tensor is being
    accessed"), and an optimizer built from `[eta]` fails with "can't optimize a non-leaf
    Tensor". Under `torch.no_grad()`, `w = w - lr * w.grad` makes `w` a new tensor that
    does not require grad at all: the next backward() fails or never reaches it.

    ## Example
    ```python
    eta = torch.tensor(0.5, requires_grad=True)
    eta = eta * 2
    loss = (eta * x).sum()
    loss.backward()
    print(eta.grad)  # None
    ```

    ## Use instead
    ```python
    eta = torch.tensor(0.5, requires_grad=True)
    eta_scaled = eta * 2
    loss = (eta_scaled * x).sum()
    loss.backward()
    print(eta.grad)  # the leaf's gradient
    ```
    The new name is `<name>_<op>` (`w_t`, `x_view`, `eta_scaled`), made unique in the
    file. Reads after the rebinding that use the value (computations, up to the next
    binding of the name) are renamed; reads that mean the leaf stay: `eta.grad`, an
    optimizer built from it (`torch.optim.SGD([eta], ...)`), and in-place updates under
    `torch.no_grad()`.

    ## Fix safety
    Safe: the derived value and every computation from it are unchanged; only the reads
    that mean the leaf now see it. Reported without a fix where renaming could change
    what other code sees: the rebinding sits in a loop that does not create the leaf (each
    iteration would derive from the previous value), the name is declared `global` /
    `nonlocal` or read by a nested function or lambda, the derived value is returned,
    yielded or stored as an attribute (the leaf is lost to the caller: create the leaf
    from the final value instead, see GF103), a later read lies outside the block of the
    rebinding (an `if` branch), or the rebinding runs under `torch.no_grad()` (update in
    place: `w -= lr * w.grad`). Names that only alias a leaf held elsewhere
    (`weight = self.weight`), loop variables over `parameters()`, tensors that do not
    require grad and values that are leaves again (`w = w.detach().requires_grad_()`,
    `w = nn.Parameter(w)`) are not reported.
    """

    code = "GF102"
    assign_targets = frozenset({ast.Name})  # visit_Assign: ``w = w * 2``
    fix_restores_gradient = True
    name = "leaf-rebinding"
    synopsis = (
        "Finds a name holding a leaf rebound to a value derived from it (`w = w * 2`), "
        "which loses the leaf, and binds the derived value to a new name."
    )
    message = "Rebinding a leaf's name to an op on it loses the leaf: its `.grad` stays `None`"
    fix_safety = FixSafety.SAFE
    fix_availability = FixAvailability.SOMETIMES

    VALID = [
        Valid(
            """
            import torch
            x = torch.randn(3, 4)
            x = x * 2  # data, no requires_grad
            x = x.view(12)
            """
        ),
        Valid(
            """
            import torch
            from torch import nn
            import torch.nn.functional as F

            class Conv(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.weight = nn.Parameter(torch.randn(4, 3, 3, 3))

                def forward(self, x):
                    weight = self.weight
                    weight = weight * 0.5  # the leaf is still self.weight
                    return F.conv2d(x, weight)
            """
        ),
        Valid(
            """
            import torch
            w = torch.randn(3, requires_grad=True)
            w = w.detach().requires_grad_()
            b = torch.randn(3, requires_grad=True)
            b = b.detach()
            """
        ),
        Valid(
            """
            import torch
            w = torch.randn(3, requires_grad=True)
            w_scaled = w * 2
            w_scaled.sum().backward()
            print(w.grad)
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            x = torch.randn(4)
            eta = torch.tensor(0.5, requires_grad=True)
            eta = eta * 2  # scale
            loss = (eta * x).sum()
            loss.backward()
            print(eta.grad)
            """,
            """
            import torch
            x = torch.randn(4)
            eta = torch.tensor(0.5, requires_grad=True)
            eta_scaled = eta * 2  # scale
            loss = (eta_scaled * x).sum()
            loss.backward()
            print(eta.grad)
            """,
        ),
        Invalid(
            """
            import torch as th

            def fit(x, y):
                w = th.randn(4, 3, requires_grad=True)
                w = w.t()
                opt = th.optim.SGD([w], lr=0.1)
                w = w.contiguous()
                loss = ((x @ w - y) ** 2).mean()
                loss.backward()
                opt.step()
                return loss
            """,
            """
            import torch as th

            def fit(x, y):
                w = th.randn(4, 3, requires_grad=True)
                w_t = w.t()
                opt = th.optim.SGD([w], lr=0.1)
                w_t = w_t.contiguous()
                loss = ((x @ w_t - y) ** 2).mean()
                loss.backward()
                opt.step()
                return loss
            """,
        ),
        Invalid(
            """
            import torch
            w = torch.randn(3, requires_grad=True)
            for step in range(3):
                w = w * 2  # compounds: each iteration reads the previous value
                w.sum().backward()
            """,
            report_only=True,
        ),
        Invalid(
            """
            import torch

            def make_weight():
                w = torch.randn(4, 3, requires_grad=True)
                w = w.t()
                return w
            """,
            report_only=True,
        ),
        Invalid(
            """
            import torch
            w = torch.randn(3, requires_grad=True)
            x = torch.randn(3)
            for step in range(3):
                (w * x).sum().backward()
                with torch.no_grad():
                    w = w - 0.1 * w.grad
            """,
            report_only=True,
        ),
    ]

    # -- deciding --------------------------------------------------------------------------
    def visit_Assign(self, node: ast.Assign) -> None:
        if len(node.targets) != 1 or type(node.targets[0]) is not ast.Name:
            return
        target = node.targets[0]
        spelled = self.analysis.name_nodes_in(node.value, target.id)
        if not spelled:
            return  # cheap: the name is not even spelled in the value
        # its reads: not inside a lambda of the value (``_name_reads``, from the index)
        own_reads = self.analysis.outside_nested(node.value, spelled, (ast.Lambda,))
        if not own_reads:
            return
        binding = self.analysis.reaching_binding(own_reads[0])
        if binding is None or not _makes_leaf(binding):
            return  # cheap first: the reason would hold this binding (most are parameters)
        reason = self.analysis.leaf_reason(own_reads[0])
        if reason is None or not _creates_leaf(reason):
            return
        if self.analysis.leaf_value_reason(node.value, node) is not None:
            return  # the new value is a leaf again
        if not self.analysis.requires_grad(node.value, node):
            return  # detached on purpose
        if self._harmless(node, target.id, reason):
            return  # nothing asks for the leaf afterwards: a deliberate derived value
        self._report(node, target, reason)

    def _harmless(self, node: ast.Assign, name: str, reason: LeafReason) -> bool:
        """Grad mode on, outside a loop that keeps compounding the value, the derived value
        does not leave the scope, and nothing uses the name as the leaf afterwards."""
        analysis = self.analysis
        if analysis.in_no_grad(node) or self._in_loop_without_leaf(
            node, analysis.scope_of(node), reason.binding
        ):
            return False
        after = analysis.end_index(node)
        reads = [r for r in _name_reads(analysis.scope_of(node).node) if r.id == name]
        transient = reason.binding is not None and _re_leafed(reason.binding.value)
        if not transient and any(analysis.index(r) > after and self._escape(r) for r in reads):
            return False
        return not self._leaf_wanted_later(node, name)

    def _leaf_wanted_later(self, node: ast.Assign, name: str) -> bool:
        """After the rebinding (or earlier in a loop around it, which runs again), the
        name is used as the leaf: ``name.grad``, an optimizer built from it, an in-place
        update under no_grad. Without such a use the symptom never shows (diffusers'
        attend-and-excite refines ``latents = self._update_latent(latents, ...)`` with
        ``autograd.grad`` and never reads ``latents.grad``)."""
        analysis = self.analysis
        scope = analysis.scope_of(node)
        loops = [a for a in analysis.ancestors(node) if isinstance(a, _LOOPS)]
        after = analysis.end_index(node)
        for read in _name_reads(scope.node):
            if read.id != name or not self._means_leaf(read):
                continue
            if analysis.index(read) > after or any(analysis.contains(o, read) for o in loops):
                return True
        return False

    def _report(self, node: ast.Assign, target: ast.Name, reason: LeafReason) -> None:
        name = target.id
        message = (
            f"`{name}` holds a leaf ({reason.description}); rebinding it to an op on itself "
            f"loses the leaf: `{name}.grad` stays `None`"
        )
        reads = self._later_reads(node, name)
        unsafe = self._why_unsafe(node, name, reason) or reads.unsafe
        if unsafe is not None:
            self.report(node, f"{message} ({unsafe})")
            return
        new_name = self._new_name(name, node.value)
        renamed = [target, *reads.targets, *reads.derived]

        def build(editor: Editor) -> list[Edit]:
            names = [editor.node(n) for n in renamed]
            return [Edit(n, n.with_changes(value=new_name)) for n in names]

        description = f"Bind the derived value to `{new_name}`; `{name}` keeps the leaf"
        self.report(node, message, fix=self.plan(build, description))

    def _why_unsafe(self, node: ast.Assign, name: str, reason: LeafReason) -> str | None:
        analysis = self.analysis
        if analysis.in_no_grad(node):
            return f"under no_grad the new `{name}` does not require grad: update it in place"
        scope = analysis.scope_of(node)
        if _declared_global(analysis.module, name):
            return f"`{name}` is declared global or nonlocal"
        if self._in_loop_without_leaf(node, scope, reason.binding):
            return "the rebinding repeats in a loop and reads its own previous value"
        if self._read_by_nested_function(scope, name):
            return f"`{name}` is read by a nested function or lambda"
        return None

    def _in_loop_without_leaf(self, node: ast.Assign, scope: Scope, leaf: Binding | None) -> bool:
        return leaf is not None and self._in_loop_without(node, leaf.node, scope)

    def _in_loop_without(self, node: ast.AST, other: ast.AST, scope: Scope) -> bool:
        """``node`` lies in a loop of ``scope`` that does not contain ``other``."""
        for ancestor in self.analysis.ancestors(node):
            if ancestor is scope.node:
                return False
            if isinstance(ancestor, _LOOPS) and not self.analysis.contains(ancestor, other):
                return True
        return False

    def _read_by_nested_function(self, scope: Scope, name: str) -> bool:
        own = scope.bindings.get(name)
        for read in _name_reads(scope.node, nested=True):
            if read.id != name or self.analysis.bindings(read) is not own:
                continue
            if self._nested_scope_between(read, scope) is not None:
                return True
        return False

    def _nested_scope_between(self, node: ast.AST, scope: Scope) -> ast.AST | None:
        for ancestor in self.analysis.ancestors(node):
            if ancestor is scope.node:
                return None
            if isinstance(ancestor, _NESTED_SCOPES):
                return ancestor
        return None

    # -- the reads after the rebinding -----------------------------------------------------
    def _later_reads(self, node: ast.Assign, name: str) -> Reads:
        """Classify the reads of ``name`` after ``node`` up to the next binding of it; a
        later ``name = f(name)`` continues the derived value (``w = w.contiguous()``)."""
        analysis = self.analysis
        scope = analysis.scope_of(node)
        block = self._block(node)
        reads = Reads()
        is_view = _is_view_of(node.value, name)
        end = self._range_end(node, name, scope, reads)
        start = analysis.end_index(node)
        for read in _name_reads(scope.node):
            position = analysis.index(read)
            if read.id != name or not start < position < end:
                continue
            if analysis.bindings(read) is not scope.bindings.get(name):
                continue
            if self._means_leaf(read):
                continue
            escape = self._escape(read)
            if escape is None and block is not None and not self._in_block(block, read):
                escape = "a later read lies outside the block of the rebinding"
            if escape is None and not is_view and self._in_loop_without(read, node, scope):
                escape = (
                    "a loop reads the derived value but does not recompute it: after the "
                    "leaf is updated it would be stale; derive it inside the loop"
                )
            if escape is not None:
                reads.unsafe = escape
                return reads
            reads.derived.append(read)
        return reads

    def _block(self, node: ast.stmt) -> list[ast.stmt] | ast.Module | None:
        """The statement list holding ``node`` (a body, an ``orelse``...), or the module."""
        parent = self.analysis.parent(node)
        if type(parent) is ast.Module:
            return parent
        for field_name in ("body", "orelse", "finalbody"):
            statements = getattr(parent, field_name, None)
            if type(statements) is list and node in statements:
                return statements
        return None

    def _in_block(self, block: list[ast.stmt] | ast.Module, node: ast.AST) -> bool:
        if type(block) is ast.Module:
            return self.analysis.contains(block, node)
        return self.analysis.block_contains(block, node)  # type: ignore[arg-type]

    def _range_end(self, node: ast.Assign, name: str, scope: Scope, reads: Reads) -> int:
        analysis = self.analysis
        later = sorted(
            (b for b in scope.bindings.get(name, []) if b.start > analysis.end_index(node)),
            key=lambda b: b.start,
        )
        for binding in later:
            if binding.kind == "augassign":
                continue
            statement = binding.node
            if not (type(statement) is ast.Assign and _reads_name(statement.value, name)):
                return binding.start
            if len(statement.targets) != 1 or type(statement.targets[0]) is not ast.Name:
                reads.unsafe = f"`{name}` is rebound again by an unpacking assignment"
                return binding.start
            reads.targets.append(statement.targets[0])
        return analysis.end_index(scope.node) + 1

    def _means_leaf(self, read: ast.Name) -> bool:
        """``w.grad``, an optimizer built from ``w``, an in-place update under no_grad."""
        analysis = self.analysis
        parent = analysis.parent(read)
        if type(parent) is ast.Attribute and parent.value is read:
            if parent.attr in LEAF_ATTRIBUTES:
                return True
        if self._in_optimizer_call(read):
            return True
        return analysis.in_no_grad(read) and self._is_inplace_update(read)

    def _in_optimizer_call(self, read: ast.Name) -> bool:
        child: ast.AST = read
        for ancestor in self.analysis.ancestors(read):
            if type(ancestor) is ast.Call:
                name = self.analysis.call_name(ancestor) or ""
                if name.startswith("torch.optim."):
                    return True
                func = ancestor.func
                if type(func) is ast.Attribute and func.attr == "add_param_group":
                    return True
                return False  # only list/tuple/dict literals may lie between
            if not isinstance(ancestor, _OPTIMIZER_ARGUMENT_PARTS):
                return False
            if not self._plain_element(ancestor, child):
                return False  # ``[*ws]``, ``{**w}``: not an element itself
            child = ancestor
        return False

    def _plain_element(self, container: ast.AST, child: ast.AST) -> bool:
        """``child`` is an element of ``container`` as LibCST's ``Element``, ``Arg`` and
        ``DictElement`` are: ``*xs`` counts only as a call's argument, ``**d`` not in a dict."""
        if type(container) is ast.Starred:
            return type(self.analysis.parent(container)) is ast.Call
        if type(container) is ast.Dict:
            return not any(
                k is None and v is child for k, v in zip(container.keys, container.values)
            )
        return True

    def _is_inplace_update(self, read: ast.Name) -> bool:
        parent = self.analysis.parent(read)
        if type(parent) is ast.AugAssign and parent.target is read:
            return _changes_in_place(parent)
        if type(parent) is ast.Subscript and parent.value is read:
            holder = self.analysis.parent(parent)
            return type(holder) is ast.Assign and parent in holder.targets
        if type(parent) is ast.Attribute and parent.value is read:
            if parent.attr in UPDATE_ATTRIBUTES:
                return True
            call = self.analysis.parent(parent)
            return parent.attr.endswith("_") and type(call) is ast.Call and call.func is parent
        return False

    def _escape(self, read: ast.Name) -> str | None:
        """The derived value itself leaves the scope: returned, yielded, an attribute."""
        child: ast.AST = read
        parent = self.analysis.parent(read)
        while type(parent) is ast.Tuple or type(parent) is ast.List:
            child, parent = parent, self.analysis.parent(parent)
        if type(parent) is ast.Return or type(parent) is ast.Yield:
            return "the derived value is returned: create the leaf from the final value"
        if (
            type(parent) is ast.Assign
            and parent.value is child
            and any(type(t) in (ast.Attribute, ast.Subscript) for t in parent.targets)
        ):
            return "the derived value is stored: create the leaf from the final value"
        return None

    # -- fixing ----------------------------------------------------------------------------
    def _new_name(self, name: str, value: ast.expr) -> str:
        taken = _all_identifiers(self.analysis.module)
        base = f"{name}_{_op_suffix(value)}"
        candidate, counter = base, 2
        while candidate in taken:
            candidate, counter = f"{base}{counter}", counter + 1
        return candidate


def _changes_in_place(node: ast.AugAssign) -> bool:
    """``h += 1`` changes the tensor ``h`` in place; ``h @= m`` rebinds ``h`` (the ``ast``
    twin of :func:`gradfix.inplace.changes_in_place`, from the same table)."""
    statement = ast.unparse(ast.AugAssign(ast.Name("h"), node.op, ast.Constant(0)))
    return statement.split()[1] in AUGMENTED_ASSIGNMENTS


def _re_leafed(value: ast.expr | None) -> bool:
    """``x.detach().requires_grad_()`` (or ``.clone().detach()...``): a leaf made from
    existing data for one gradient step (latent refinement, adversarial attacks), whose
    derived value is meant to go on as data."""
    if not (type(value) is ast.Call and type(value.func) is ast.Attribute):
        return False
    if value.func.attr != "requires_grad_":
        return False
    receiver = value.func.value
    while type(receiver) is ast.Call and type(receiver.func) is ast.Attribute:
        if receiver.func.attr == "detach":
            return True
        receiver = receiver.func.value
    return False


def _creates_leaf(reason: LeafReason) -> bool:
    """The name's binding made the leaf (not an alias of one held elsewhere)."""
    return reason.binding is not None and _makes_leaf(reason.binding)


def _makes_leaf(binding: Binding) -> bool:
    """``binding`` assigns a value that may make a leaf: not an alias of a name or an
    attribute, nor one part of an unpacked value."""
    if binding.kind != "assign" or binding.unpack_index is not None:
        return False
    return binding.value is not None and not isinstance(binding.value, (ast.Name, ast.Attribute))


def _is_view_of(value: ast.expr, name: str) -> bool:
    """``w.t()``, ``x.view(3, 4)``, ``w.T``, ``w[0]``: a view that follows the leaf's updates."""
    if type(value) is ast.Name:
        return value.id == name
    if type(value) is ast.Subscript:
        return _is_view_of(value.value, name)
    if type(value) is ast.Attribute and value.attr in VIEW_ATTRIBUTES:
        return _is_view_of(value.value, name)
    if type(value) is ast.Call and type(value.func) is ast.Attribute:
        method = value.func.attr
        return method in VIEW_OPS and method != "detach" and _is_view_of(value.func.value, name)
    return False


def _op_suffix(value: ast.expr) -> str:
    if type(value) is ast.BinOp:
        return BINARY_SUFFIXES.get(type(value.op), "derived")
    if type(value) is ast.UnaryOp and type(value.op) is ast.USub:
        return "neg"
    if type(value) is ast.Attribute:
        return value.attr.lower()
    if type(value) is ast.Call:
        func = value.func
        if type(func) is ast.Attribute:
            return func.attr.strip("_").lower() or "derived"
        if type(func) is ast.Name:
            return func.id.lower()
    return "derived"


def _declared_global(module: ast.Module, name: str) -> bool:
    return any(
        (type(node) is ast.Global or type(node) is ast.Nonlocal) and name in node.names
        for node in ast.walk(module)
    )


class _NameReads(VariableNames):
    """Names used as variables, in source order, as the rule counted them on LibCST: not
    a plain ``name = ...`` target, not a parameter or its annotation (defaults are), not
    inside a nested function, lambda or class unless ``nested``; a ``def``'s decorators
    come after its body."""

    def __init__(self, root: ast.AST, nested: bool) -> None:
        super().__init__()
        self.root = root
        self.nested = nested

    def visit(self, node: ast.AST) -> None:
        if isinstance(node, _NESTED_SCOPES) and node is not self.root and not self.nested:
            return
        super().visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            if type(target) is not ast.Name:
                self.visit(target)
        self.visit(node.value)

    def visit_arg(self, node: ast.arg) -> None:
        return  # the parameter's name and annotation; its default is visited by ``arguments``

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.visit(node.args)
        for statement in node.body:
            self.visit(statement)
        for decorator in node.decorator_list:
            self.visit(decorator)

    visit_AsyncFunctionDef = visit_FunctionDef


def _name_reads(node: ast.AST, *, nested: bool = False) -> list[ast.Name]:
    """The variable reads in ``node``; inside nested functions too when ``nested``."""
    finder = _NameReads(node, nested)
    finder.visit(node)
    return finder.names


def _reads_name(node: ast.AST, name: str) -> bool:
    return any(read.id == name for read in _name_reads(node))


def _all_identifiers(module: ast.Module) -> set[str]:
    """Every identifier spelled in the file (LibCST's ``Name`` nodes): variables,
    attribute names, keywords, parameters, definitions, imports."""
    names: set[str] = set()
    for node in ast.walk(module):
        if type(node) is ast.Name:
            names.add(node.id)
        elif type(node) is ast.Attribute:
            names.add(node.attr)
        elif type(node) is ast.keyword or type(node) is ast.arg:
            names.add(node.arg or "")
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif type(node) is ast.alias:
            names.update(node.name.split("."))
            names.add(node.asname or "")
        elif type(node) is ast.ImportFrom:
            names.update((node.module or "").split("."))
        elif type(node) is ast.Global or type(node) is ast.Nonlocal:
            names.update(node.names)
        elif type(node) is ast.ExceptHandler:
            names.add(node.name or "")
    return names
