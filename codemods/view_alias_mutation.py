"""GF206 view-alias-mutation."""

from __future__ import annotations

import ast
from dataclasses import dataclass

import libcst as cst

from gradfix.edits import Editor
from gradfix.inplace import (
    NameIndex,
    changes_in_place,
    code_with_parentheses,
    first_argument,
    inplace_function,
    inplace_spelling,
    is_inplace_call,
    small_statement,
    spelled_inplace,
)
from gradfix.rule import (
    Edit,
    FixAvailability,
    FixPlan,
    FixSafety,
    Invalid,
    Rule,
    RuleContext,
    Valid,
)
from gradfix.semantic import VIEW_ATTRIBUTES, Binding, LeafReason
from gradfix.torch_facts import VIEW_METHODS, is_inplace_method


@dataclass
class ViewBinding:
    """``name = <view of base>``: the base expression and the view expression."""

    binding: Binding
    value: ast.expr
    base: ast.expr  # a Name or ``self.attr``
    reason: LeafReason


@dataclass
class Change:
    """One in-place change of the view: through ``.data`` or not."""

    node: ast.AST
    statement: ast.stmt
    view: ast.Name
    through_data: bool


class ViewAliasMutation(Rule):
    """
    ## What it does
    Finds a view of a leaf tensor that requires grad (a parameter, a `requires_grad=True`
    tensor) bound to a name, `a = w[:4]`, `a = w.view(-1)`, `a = w.t()`, and then changed
    in place: `a.add_(1)`, `a += 1`, `a[0] = 0`, `a.zero_()`, `a.data.copy_(...)`.

    ## Why is this bad?
    Slicing, `view`, `t()`, `transpose`, `permute`... do not copy: `a` shares storage
    with `w`. Changing `a` in place raises "a view of a leaf Variable that requires grad
    is being used in an in-place operation", and through `.data` it silently changes `w`
    too: the parameter you meant to leave alone is modified.

    ## Example
    ```python
    v1 = torch.nn.Parameter(torch.rand(10))
    a = v1[:4]
    a.data.copy_(torch.rand(4))  # v1[:4] changes as well
    ```

    ## Use instead
    ```python
    v1 = torch.nn.Parameter(torch.rand(10))
    a = v1[:4].clone()
    a.data.copy_(torch.rand(4))  # v1 is untouched
    ```
    If changing the parameter is the point (initialising part of it), write it as such:
    `with torch.no_grad(): v1[:4].copy_(torch.rand(4))`.

    ## Fix safety
    Cloning the view changes what the base shows afterwards. So the fix is offered only
    when the base is a local variable of a function (not module state, not an argument,
    not an attribute) that is not read after the change: then the change to the base was
    invisible and the clone keeps every forward result; it is safe. When the change
    raised (no `.data`, grad mode on) and the base is read afterwards, the clone is the
    likely intent but changing the parameter is possible too (then the fix is
    `torch.no_grad()`): the clone is an unsafe fix. When the change went through `.data`
    (it ran and changed the parameter) and the base is read afterwards, the finding is
    reported without a fix: cloning would change what the rest of the code sees.
    Not reported: views of tensors that do not require grad, changes under `no_grad()`,
    `.data` changes of views of attributes (`w = self.weight[:n]; w.data.copy_(...)`),
    of function arguments or of loop variables (`for p in model.parameters()`), and names
    rebound to a view of themselves (`x = x[:4]; x.add_(1)`): filling a buffer or a
    parameter through a view is how library code initialises and updates them.
    """

    code = "GF206"
    assign_targets = frozenset({ast.Subscript})  # visit_Assign: ``v[0] = ...``
    name = "view-alias-mutation"
    synopsis = (
        "Finds in-place changes to a view of a leaf that requires grad (`a = w[:4]; "
        "a.add_(1)`) and makes the view a copy where a copy was meant."
    )
    message = "A view of a leaf tensor that requires grad is changed in place"
    fix_safety = FixSafety.SAFE
    fix_availability = FixAvailability.SOMETIMES
    fix_safeties = (FixSafety.SAFE, FixSafety.UNSAFE)

    VALID = [
        Valid(
            """
            import torch
            buf = torch.zeros(8)
            src = torch.rand(4)
            out = buf[:4]
            out.copy_(src)  # filling a buffer through a view
            x = torch.rand(6)
            x = x[:4]
            x.add_(1)
            """
        ),
        Valid(
            """
            import torch
            from torch import nn

            class Embed(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.weight = nn.Parameter(torch.empty(10, 4))
                    with torch.no_grad():
                        head = self.weight[:2]
                        head.zero_()  # initialising part of a parameter
            """
        ),
        Valid(
            """
            import torch
            v2 = torch.nn.Parameter(torch.rand(10))
            b = v2[:4].clone()
            b.data.copy_(torch.rand(4))
            print(v2)
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch

            def noisy_head(x):
                v1 = torch.nn.Parameter(torch.rand(10))
                a = v1[:4]
                a.data.copy_(torch.rand(4))
                return (a * x).sum()
            """,
            """
            import torch

            def noisy_head(x):
                v1 = torch.nn.Parameter(torch.rand(10))
                a = v1[:4].clone()
                a.data.copy_(torch.rand(4))
                return (a * x).sum()
            """,
        ),
        Invalid(
            """
            import torch
            v1 = torch.nn.Parameter(torch.rand(10))
            a = v1[:4]
            a.data.copy_(torch.rand(4))
            print(v1)
            """,
            report_only=True,
        ),
        Invalid(
            """
            import torch
            w = torch.randn(3, 4, requires_grad=True)
            a = w.t()
            a.zero_()
            print(w)
            """,
            """
            import torch
            w = torch.randn(3, 4, requires_grad=True)
            a = w.t().clone()
            a.zero_()
            print(w)
            """,
        ),
    ]

    def __init__(self, context: RuleContext) -> None:
        super().__init__(context)
        self.names = NameIndex(self.analysis)

    # -- collecting changes --------------------------------------------------------------------
    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        if changes_in_place(node):
            self._target(node, node.target)

    def visit_Assign(self, node: ast.Assign) -> None:
        if len(node.targets) == 1 and type(node.targets[0]) is ast.Subscript:
            self._target(node, node.targets[0])

    def _target(self, statement: ast.stmt, target: ast.expr) -> None:
        view, through_data = _changed_name(target)
        if view is not None:
            self._check(Change(statement, statement, view, through_data))

    def takes_call(self, spelled: str, aliased: tuple[str, ...]) -> bool:
        """The walk hands :meth:`visit_Call` only the calls that may change in place."""
        return inplace_spelling(spelled, aliased, frozenset())

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if not spelled_inplace(self.analysis, func):
            return  # cheap first: most calls change nothing in place
        first = first_argument(node)
        if inplace_function(self.analysis, node) is not None and first is not None:
            changed: ast.expr = first
        elif type(func) is ast.Attribute and is_inplace_method(func.attr):
            if self.analysis.qualified_name(func) is not None or is_inplace_call(func.value):
                return
            changed = func.value
        else:
            return
        view, through_data = _changed_name(changed)
        statement = small_statement(self.analysis, node)
        if view is not None and statement is not None:
            self._check(Change(node, statement, view, through_data))

    # -- deciding --------------------------------------------------------------------------------
    def _check(self, change: Change) -> None:
        view = self._view_binding(change)
        if view is None:
            return
        if self.analysis.in_no_grad(change.statement):
            return  # how parameters are initialised or updated on purpose
        silent = change.through_data
        base_is_name = type(view.base) is ast.Name
        if silent and not self._assigned_local(view.base):
            return  # writing into a parameter attribute or a loop's parameter on purpose
        base_read = not base_is_name or self._base_read_after(view, change)
        fix: FixPlan | None = None
        if not base_read:
            fix = self._clone_fix(view)
        elif not silent:
            fix = self._clone_fix(view, FixSafety.UNSAFE)
        self.report(change.node, self._message(view, change, silent, base_read), fix=fix)

    def _view_binding(self, change: Change) -> ViewBinding | None:
        analysis = self.analysis
        binding = analysis.reaching_binding(change.view, change.statement)
        if binding is None or binding.kind != "assign" or binding.value is None:
            return None
        if binding.unpack_index is not None or type(binding.node) is not ast.Assign:
            return None
        if analysis.scope_of(binding.node).node is not analysis.scope_of(change.statement).node:
            return None
        base = _view_base(binding.value)
        if base is None:
            return None
        if type(base) is ast.Name and base.id == binding.name:
            return None  # ``x = x[:4]``: the old tensor has no name left
        reason = analysis.leaf_reason(base, binding.node)
        if reason is None:
            return None
        return ViewBinding(binding, binding.value, base, reason)

    def _assigned_local(self, base: ast.expr) -> bool:
        """``base`` is a name bound by an assignment (``v1 = nn.Parameter(...)``), not an
        attribute, a function argument or a ``for p in model.parameters()`` variable."""
        if type(base) is not ast.Name:
            return False
        binding = self.analysis.reaching_binding(base, base)
        return binding is not None and binding.kind == "assign"

    def _base_read_after(self, view: ViewBinding, change: Change) -> bool:
        """The base may be seen after the change: it is not a local of a function (module
        state, a parameter of the function, an attribute), or it is used after the change
        (or anywhere in a loop around it)."""
        analysis = self.analysis
        base = view.base
        if type(base) is not ast.Name:
            return True
        binding = analysis.reaching_binding(base, view.binding.node)
        scope = analysis.scope_of(change.statement).node
        is_function = isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef))
        if binding is None or binding.kind != "assign" or not is_function:
            return True
        after = analysis.end_index(change.statement)
        for loop in analysis.ancestors(change.statement):
            is_loop = isinstance(loop, (ast.For, ast.AsyncFor, ast.While))
            if is_loop and not analysis.contains(loop, view.binding.node):
                after = min(after, analysis.index(loop))
        return any(analysis.index(n) > after for n in self.names.named(scope, base.id))

    def _message(self, view: ViewBinding, change: Change, silent: bool, base_read: bool) -> str:
        name = view.binding.name
        base = code_with_parentheses(self.context.source, view.base)
        value = code_with_parentheses(self.context.source, view.value)
        if silent:
            text = (
                f"`{name}` is a view of `{base}` ({view.reason.description}): changing it "
                f"in place changes `{base}` too"
            )
        else:
            text = (
                f"`{name}` is a view of `{base}` ({view.reason.description}): changing it "
                "in place raises 'a view of a leaf Variable that requires grad is being "
                "used in an in-place operation'"
            )
        advice = f"; if `{name}` is meant as a copy, use `{name} = {value}.clone()`"
        if base_read and not silent:
            advice += f"; to change `{base}` itself, do it under `torch.no_grad()`"
        return text + advice

    def _clone_fix(self, view: ViewBinding, safety: FixSafety | None = None) -> FixPlan:
        target = view.value

        def build(editor: Editor) -> list[Edit]:
            value = editor.node(target)
            assert isinstance(value, cst.BaseExpression)
            return [Edit(value, cst.Call(cst.Attribute(value, cst.Name("clone"))))]

        return self.plan(
            build, f"Clone the view: `{view.binding.name} = ....clone()`", safety=safety
        )


def _changed_name(target: ast.expr) -> tuple[ast.Name | None, bool]:
    """The name whose tensor ``target`` changes, and whether it goes through ``.data``:
    ``a`` -> (a, False), ``a[0]`` -> (a, False), ``a.data`` -> (a, True)."""
    through_data = False
    while True:
        if type(target) is ast.Subscript:
            target = target.value
        elif type(target) is ast.Attribute and target.attr == "data":
            through_data = True
            target = target.value
        else:
            break
    return (target if type(target) is ast.Name else None), through_data


def _view_base(value: ast.expr) -> ast.expr | None:
    """The tensor ``value`` is a view of: ``w[:4]``, ``w.view(-1)``, ``w.t()``, ``w.T``,
    ``self.w[0].unsqueeze(0)`` -> ``w`` / ``self.w``; None for anything else."""
    expr = value
    steps = 0
    while True:
        if type(expr) is ast.Subscript and all(_is_view_index(e) for e in _indices(expr)):
            expr = expr.value
        elif type(expr) is ast.Attribute and expr.attr in VIEW_ATTRIBUTES:
            expr = expr.value
        elif (
            type(expr) is ast.Call
            and type(expr.func) is ast.Attribute
            and expr.func.attr in VIEW_METHODS
        ):
            expr = expr.func.value
        else:
            break
        steps += 1
    if steps == 0:
        return None
    if type(expr) is ast.Name:
        return expr
    if type(expr) is ast.Attribute and type(expr.value) is ast.Name:
        return expr if expr.value.id == "self" else None
    return None


def _indices(subscript: ast.Subscript) -> list[ast.expr]:
    """The comma-separated elements of the brackets (LibCST's ``Subscript.slice``):
    ``x[a, b]`` has two, ``x[(a, b)]`` one (a parenthesized tuple)."""
    index = subscript.slice
    if type(index) is not ast.Tuple or not index.elts:
        return [index]
    first = index.elts[0]
    bare = (index.lineno, index.col_offset) == (first.lineno, first.col_offset)
    return list(index.elts) if bare else [index]


def _is_view_index(item: ast.expr) -> bool:
    """A slice, an integer literal, ``None`` or ``...``: basic indexing gives a view."""
    if type(item) is ast.Slice:
        return True
    if type(item) is ast.UnaryOp:
        item = item.operand
        return type(item) is ast.Constant and type(item.value) is int
    if type(item) is not ast.Constant:
        return False
    return type(item.value) is int or item.value is Ellipsis or item.value is None
