"""GF203 row-loop-inplace."""

from __future__ import annotations

import ast
from dataclasses import dataclass

import libcst as cst

from gradfix.edits import Editor
from gradfix.rebuild import (
    POINTWISE_OPS,
    SelfReads,
    assigned_value,
    index_elements,
    integer_index,
    may_alias,
    names_in,
    rebindable,
)
from gradfix.rule import FixAvailability, FixPlan, FixSafety, Invalid, Rule, Valid
from gradfix.semantic import REDUCTIONS, Binding, Semantic
from gradfix.semantic.syntax import (
    argument_value,
    call_arguments,
    is_number_literal,
    normalized_code,
)
from gradfix.torch_facts import LIKE_FACTORIES, SIZED_FACTORIES

#: Longest line the rewrite writes on one line before wrapping (the usual 100 columns).
MAX_LINE = 100
#: A static size: an integer, or the identity of the binding of a name that holds one.
Size = int | tuple[str, int]


@dataclass(frozen=True)
class RowWrite:
    """``x[i] = value`` in the body of ``for i in range(...)``."""

    loop: ast.For | ast.AsyncFor
    assign: ast.Assign
    index: str  # the loop variable
    base: ast.Name  # ``x``
    binding: Binding  # the binding of ``x`` the write sees
    integers: frozenset[str]  # variables of the range loops around the write


class RowLoopInplace(Rule):
    """
    ## What it does
    Finds loops that rewrite a tensor that requires grad row by row from its own rows,
    `for i in range(n): x[i] = g(x[i])`, where `g` saves the row for backward
    (`x[i] / x[i].sum()`, `x[i] / x[i].norm()`, `x[i] * x[i]`, `torch.log(x[i])`...), and
    rebuilds the tensor out of place with `torch.stack`.

    ## Why is this bad?
    `x[i]` is a view of `x`: the division saves it for its backward, and the assignment
    then writes into `x`, which bumps the version counter all its views share. `backward()`
    fails with "one of the variables needed for gradient computation has been modified by
    an inplace operation: [torch.FloatTensor [4]], which is output 0 of SelectBackward0, is
    at version 3; expected version 2 instead." Right-hand sides that save nothing of the
    row (`x[i] * 2`, `x[i] + 1`) do not fail and are not reported. A leaf that requires
    grad (`nn.Parameter`) fails at the assignment already: that is GF201 leaf-inplace.

    ## Example
    ```python
    x = torch.exp(x - x.max())
    for i in range(batch_size):
        x[i] = x[i] / x[i].sum()
    ```

    ## Use instead
    ```python
    x = torch.exp(x - x.max())
    x = torch.stack([x[i] / x[i].sum() for i in range(batch_size)])
    ```
    For a 2-D `x` the vectorised `x = x / x.sum(dim=1, keepdim=True)` is the same and
    faster. A loop over part of the rows keeps the others:
    `x = torch.cat([x[:k], torch.stack([g(x[i]) for i in range(k, n)]), x[n:]])`.
    Detaching or cloning the row (`x[i] / x[i].sum().detach()`) silences the error but
    drops a gradient branch: it is not a fix.

    ## Fix safety
    Safe when the loop runs over all rows (`range(len(x))`, `range(x.shape[0])`,
    `range(x.size(0))`, or a bound equal to the first size `x` was created with) and
    provably at least once, its body is the one assignment, the right-hand side is made of
    `x[i]`, numbers and whole-row reductions (so it has the row's shape and dtype), `x` is
    a fresh tensor bound in the same block that nothing else holds, and `i` is not read
    after the loop. Unsafe when the length may be zero (`torch.stack` of no rows raises
    where the loop did nothing), when the loop covers only part of the rows (the
    `torch.cat` form), when the right-hand side involves other tensors (their shape or
    dtype may differ from the row's), or when `x` is a parameter of the function (the
    caller no longer sees its tensor change). A body that reads other rows (a recurrence
    `x[i] = x[i] * x[i - 1]`, or `x.sum()` over rows already updated), that has other
    statements, or whose loop has a step, a start other than an integer, or an `else`, is
    reported without a fix.
    """

    code = "GF203"
    assign_targets = frozenset({ast.Subscript})  # visit_Assign: ``x[i] = ...``
    name = "row-loop-inplace"
    synopsis = (
        "Finds loops that rewrite a tensor in the graph row by row from its own rows and "
        "rebuild it with `torch.stack` over the rows."
    )
    message = (
        "Loop writes rows of a tensor that requires grad from its own rows through an op "
        "that saves them for backward: backward fails with 'modified by an inplace operation'"
    )
    fix_safety = FixSafety.SAFE
    fix_availability = FixAvailability.SOMETIMES
    fix_safeties = (FixSafety.SAFE, FixSafety.UNSAFE)

    VALID = [
        Valid(
            """
            import torch
            w = torch.nn.Parameter(torch.rand(3, 4))
            x = w * 2.0
            for i in range(x.shape[0]):
                x[i] = x[i] * 2 + 1  # mul by a constant and add save nothing of the row
            x.sum().backward()
            """
        ),
        Valid(
            """
            import torch
            w = torch.nn.Parameter(torch.rand(3, 4))
            out = torch.zeros(3, 4)
            h = w * 2.0
            for i in range(3):
                out[i] = h[i] / h[i].sum()  # fills another tensor: correct
            """
        ),
        Valid(
            """
            import torch
            x = torch.rand(3, 4)
            for i in range(len(x)):
                x[i] = x[i] / x[i].sum()  # data: nothing requires grad
            w = torch.nn.Parameter(torch.rand(3, 4))
            y = w * 1.0
            with torch.no_grad():
                for i in range(len(y)):
                    y[i] = y[i] / y[i].sum()
            """
        ),
        Valid(
            """
            import torch
            w = torch.nn.Parameter(torch.rand(3, 4))
            with torch.no_grad():
                for i in range(w.shape[0]):
                    w[i] = w[i] / w[i].norm()
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            batch_size = 4
            x = torch.randn(batch_size, 5, requires_grad=True)
            y = torch.exp(x - x.max())
            for i in range(batch_size):
                y[i] = y[i] / y[i].sum()
            y.sum().backward()
            """,
            """
            import torch
            batch_size = 4
            x = torch.randn(batch_size, 5, requires_grad=True)
            y = torch.exp(x - x.max())
            y = torch.stack([y[i] / y[i].sum() for i in range(batch_size)])
            y.sum().backward()
            """,
        ),
        Invalid(
            """
            import torch as th
            from torch import nn

            class Embed(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.proj = nn.Linear(8, 4)

                def forward(self, inputs):
                    h = self.proj(inputs)  # one row per sample
                    for k in range(len(h)):  # L2-normalise each row
                        h[k] = h[k] / h[k].norm()
                    return h
            """,
            """
            import torch as th
            from torch import nn

            class Embed(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.proj = nn.Linear(8, 4)

                def forward(self, inputs):
                    h = self.proj(inputs)  # one row per sample
                    # L2-normalise each row
                    h = th.stack([h[k] / h[k].norm() for k in range(len(h))])
                    return h
            """,
        ),
        Invalid(
            """
            import torch
            w = torch.nn.Parameter(torch.rand(5, 3))
            h = torch.sigmoid(w)
            for i in range(1, h.shape[0]):
                h[i] = h[i] * h[i]
            """,
            """
            import torch
            w = torch.nn.Parameter(torch.rand(5, 3))
            h = torch.sigmoid(w)
            h = torch.cat([h[:1], torch.stack([h[i] * h[i] for i in range(1, h.shape[0])])])
            """,
        ),
        Invalid(
            """
            import torch
            w = torch.nn.Parameter(torch.rand(5, 3))
            h = w * 3.0
            for i in range(1, len(h)):
                h[i] = h[i] * h[i - 1]  # a recurrence: reads the row updated before
            """,
            report_only=True,
        ),
        Invalid(
            """
            import torch
            w = torch.nn.Parameter(torch.rand(5, 3))
            h = w * 3.0
            for i in range(len(h)):
                s = h[i].sum()
                h[i] = h[i] / s
            """,
            report_only=True,
        ),
    ]

    def visit_Assign(self, node: ast.Assign) -> None:
        write = self._row_write(node)
        if write is None:
            return
        analysis = self.analysis
        base, binding = write.base, write.binding
        if analysis.in_no_grad(node) or analysis.leaf_reason(base, node) is not None:
            return  # leaves raise at the assignment: GF201 leaf-inplace
        if not analysis.is_tensor(base, node) or not analysis.requires_grad(base, node):
            return
        reads = SelfReads(analysis, base.id, binding, write.integers)
        if not reads.saved_in(node.value):
            return
        message = (
            f"`{base.id}[{write.index}] = ...` in a loop reads rows of `{base.id}` "
            "through an op that saves them for backward: backward fails with 'modified by "
            f"an inplace operation'; rebuild `{base.id}` with `torch.stack`"
        )
        self.report(node, message, fix=_RowLoopFix(self, write, reads).plan())

    def _row_write(self, node: ast.Assign) -> RowWrite | None:
        """``x[... i ...] = value`` inside ``for i in range(...)`` (the innermost such loop)."""
        if len(node.targets) != 1:
            return None
        target = node.targets[0]
        if type(target) is not ast.Subscript or type(target.value) is not ast.Name:
            return None
        indexed = {n.id for n in names_in(target.slice)}
        for ancestor in self.analysis.ancestors(node):
            if type(ancestor) in _DEFINITIONS:
                return None
            if isinstance(ancestor, _LOOPS) and type(ancestor.target) is ast.Name:
                if ancestor.target.id in indexed:
                    return self._range_write(ancestor, node, target.value)
        return None

    def _range_write(self, loop: Loop, node: ast.Assign, base: ast.Name) -> RowWrite | None:
        if _range_args(self.analysis, loop) is None:
            return None
        binding = self.analysis.reaching_binding(base, node)
        if binding is None or type(loop.target) is not ast.Name:
            return None
        integers = frozenset(
            a.target.id
            for a in self.analysis.ancestors(node)
            if isinstance(a, _LOOPS)
            and isinstance(a.target, ast.Name)
            and _range_args(self.analysis, a) is not None
        )
        return RowWrite(loop, node, loop.target.id, base, binding, integers)


#: A ``for`` loop (LibCST's ``For`` is also ``async for``).
Loop = ast.For | ast.AsyncFor
_LOOPS = (ast.For, ast.AsyncFor)
#: Scopes the search for the loop of a write stops at.
_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


class _RowLoopFix:
    """The ``torch.stack`` rewrite of one row loop, and how safe it is."""

    def __init__(self, rule: RowLoopInplace, write: RowWrite, reads: SelfReads) -> None:
        self.rule = rule
        self.analysis = rule.analysis
        self.write = write
        self.reads = reads

    def plan(self) -> FixPlan | None:
        write, analysis = self.write, self.analysis
        bounds = _range_bounds(analysis, write.loop)
        if bounds is None or not self._movable():
            return None
        rebinding = self._rebinding_safety()
        if rebinding is None or not self._reads_only_its_row(write.assign.value):
            return None
        start, stop = bounds
        if start is not None and not _is_int(start):
            return None  # ``x[:start]`` keeps the rows before it only for a start >= 0
        covers = self._covers_rows(stop)
        partial = _nonzero(start) or not covers
        unsafe = (
            rebinding is FixSafety.UNSAFE
            or partial
            or not self._nonempty(stop)
            or self._row_shape(write.assign.value) != "row"
        )
        return self.rule.plan_replace(
            write.loop,
            _Rewrite(write, start is not None and _nonzero(start), covers).statement,
            f"Rebuild `{write.base.id}` out of place with `torch.{'cat' if partial else 'stack'}`",
            safety=FixSafety.UNSAFE if unsafe else None,
        )

    # -- when the loop can become one expression --------------------------------------------
    def _movable(self) -> bool:
        """The loop is ``for i in range(...): x[i] = value`` and nothing else, with ``x[i]``
        a whole row, and ``i`` is not read after the loop."""
        loop, assign = self.write.loop, self.write.assign
        if loop.orelse or type(loop) is ast.AsyncFor:
            return False
        if self.analysis.scope_of(loop).is_class:
            return False  # a comprehension in a class body cannot see the class's names
        target = assign.targets[0]
        if type(target) is not ast.Subscript:
            return False
        if not _is_row_index(index_elements(self.analysis, target), self.write.index):
            return False
        if len(loop.body) != 1 or loop.body[0] is not assign:
            return False
        return not self._index_read_after()

    def _index_read_after(self) -> bool:
        loop = self.write.loop
        scope = self.analysis.scope_of(loop).node
        for read in names_in(scope):
            after = self.analysis.index(read) > self.analysis.end_index(loop)
            if read.id != self.write.index or not after:
                continue
            binding = self.analysis.reaching_binding(read)
            if binding is not None and binding.node is loop:
                return True
        return False

    def _rebinding_safety(self) -> FixSafety | None:
        """Rebinding ``x`` replaces writing into it: safe for a fresh tensor nothing else
        holds; unsafe for a function parameter (the caller's tensor no longer changes)."""
        loop, base, binding = self.write.loop, self.write.base, self.write.binding
        if binding.kind == "param":
            same_scope = self.analysis.scope_of(binding.node) is self.analysis.scope_of(loop)
            return FixSafety.UNSAFE if same_scope else None
        if not rebindable(self.analysis, loop, binding):
            return None
        if may_alias(self.analysis, loop, base.id, binding):
            return FixSafety.UNSAFE
        return FixSafety.SAFE

    def _reads_only_its_row(self, value: ast.expr) -> bool:
        """Every read of ``x`` in ``value`` is the row being written: no recurrence, no
        whole-tensor read that would see rows already updated, no alias of ``x``."""
        row = normalized_code(self.write.assign.targets[0])
        for name in names_in(value):
            parent = self.analysis.parent(name)
            if name.id == self.write.base.id:
                is_indexed = isinstance(parent, ast.Subscript) and parent.value is name
                if not is_indexed or normalized_code(parent) != row:
                    return False
            elif name.id != self.write.index and self.reads.is_view(name):
                return False
        return True

    # -- the range ---------------------------------------------------------------------------
    def _covers_rows(self, stop: ast.expr) -> bool:
        if self._is_length_of_base(stop, self.write.assign):
            return True
        size = _size(self.analysis, stop, self.write.loop)
        rows = _first_size(self.analysis, self.write.base, self.write.assign)
        return size is not None and size == rows

    def _is_length_of_base(self, expr: ast.expr, at: ast.AST, depth: int = 0) -> bool:
        """``len(x)``, ``x.shape[0]``, ``x.size(0)``, ``x.size()[0]``, or a name bound to one."""
        measured = _measured_tensor(self.analysis, expr)
        if measured is not None:
            return (
                measured.id == self.write.base.id
                and self.analysis.reaching_binding(measured, at) is self.write.binding
            )
        if type(expr) is ast.Name and depth < 2:
            binding = self.analysis.reaching_binding(expr, at)
            if binding is not None and binding.kind == "assign" and binding.value is not None:
                return self._is_length_of_base(binding.value, binding.node, depth + 1)
        return False

    def _nonempty(self, stop: ast.expr) -> bool:
        size = _size(self.analysis, stop, self.write.loop)
        if isinstance(size, int):
            return size >= 1
        rows = _first_size(self.analysis, self.write.base, self.write.assign)
        return isinstance(rows, int) and rows >= 1 and self._covers_rows(stop)

    # -- the shape of the right-hand side ----------------------------------------------------
    def _row_shape(self, expr: ast.expr) -> str | None:
        """'row' when ``expr`` has the shape and dtype of ``x[i]``, 'scalar' for numbers and
        whole-row reductions, None when it involves anything else."""
        if is_number_literal(expr):
            return "scalar"
        row = normalized_code(self.write.assign.targets[0])
        if type(expr) is ast.Subscript and normalized_code(expr) == row:
            return "row"
        if self._is_full_reduction(expr):
            return "scalar"
        op = self.analysis.tensor_op(expr, expr)
        if op is None or op[0] not in POINTWISE_OPS:
            return None
        shapes = [self._row_shape(o) for o in op[1]]
        if None in shapes:
            return None
        return "row" if "row" in shapes else "scalar"

    def _is_full_reduction(self, expr: ast.expr) -> bool:
        """``row.sum()``, ``torch.sum(row)``: a 0-d tensor of the row's dtype."""
        if type(expr) is not ast.Call:
            return False
        op = self.analysis.tensor_op(expr, expr)
        if op is None or op[0] not in REDUCTIONS or len(op[1]) != 1:
            return False
        return self._row_shape(op[1][0]) is not None


@dataclass(frozen=True)
class _Rewrite:
    """Builds ``x = torch.stack([...])`` (or the ``torch.cat`` form) from the LibCST loop."""

    write: RowWrite
    keeps_head: bool  # ``range(k, n)`` with k != 0: the rows before ``k`` stay
    covers: bool  # the loop runs up to the last row

    def statement(self, editor: Editor, loop: cst.CSTNode) -> cst.SimpleStatementLine:
        """The first layout that fits the line (a multi-line right-hand side keeps its own
        layout), with the loop's comments: the header's above, the body's kept."""
        assert isinstance(loop, cst.For) and isinstance(loop.iter, cst.Call)
        assign = editor.node(self.write.assign)
        assert isinstance(assign, cst.Assign)
        module = editor.module
        layouts = self._layouts(editor, loop, assign)
        depth = sum(isinstance(a, cst.IndentedBlock) for a in _cst_ancestors(editor, loop))
        margin = MAX_LINE - depth * len(module.default_indent)
        fitting = [t for t in layouts if max(len(line) for line in t.split("\n")) <= margin]
        multiline_value = "\n" in _code(assign.value)
        text = layouts[0] if multiline_value or not fitting else fitting[0]
        parsed = cst.parse_statement(text, module.config_for_parsing)
        statement = cst.ensure_type(parsed, cst.SimpleStatementLine)
        line = editor.parent(assign)
        inner = line if isinstance(line, cst.SimpleStatementLine) else None
        header = _header_whitespace(loop)
        leading = [*loop.leading_lines]
        if header.comment is not None:
            leading.append(cst.EmptyLine(comment=header.comment))
        if inner is not None:
            leading.extend(inner.leading_lines)
        if isinstance(loop.body, cst.IndentedBlock):
            leading.extend(line for line in loop.body.footer if line.comment is not None)
        # ``for ...: x[i] = ...`` on one line: its comment is the header's, moved above
        trailing = inner.trailing_whitespace if inner is not None else cst.TrailingWhitespace()
        return statement.with_changes(leading_lines=leading, trailing_whitespace=trailing)

    def _layouts(self, editor: Editor, loop: cst.For, assign: cst.Assign) -> list[str]:
        """Layouts of ``x = torch.stack([...])`` (or the ``torch.cat`` form), flat first."""
        torch = editor.alias or "torch"
        name, index = self.write.base.id, self.write.index
        element, iterable = _code(assign.value), _code(loop.iter)
        indent = editor.module.default_indent
        flat = f"[{element} for {index} in {iterable}]"
        exploded = f"[\n{indent * 2}{element}\n{indent * 2}for {index} in {iterable}\n{indent}]"
        if not self.keeps_head and self.covers:
            return [
                f"{name} = {torch}.stack({flat})",
                f"{name} = {torch}.stack(\n{indent}{flat}\n)",
                f"{name} = {torch}.stack(\n{indent}{exploded}\n)",
            ]
        bounds = [a.value for a in cst.ensure_type(loop.iter, cst.Call).args]
        pieces = [f"{torch}.stack({flat})"]
        if self.keeps_head:
            pieces.insert(0, f"{name}[:{_code(bounds[0])}]")
        if not self.covers:
            pieces.append(f"{name}[{_code(bounds[-1])}:]")
        one_line = ", ".join(pieces)
        each = "".join(f"{indent * 2}{piece},\n" for piece in pieces)
        return [
            f"{name} = {torch}.cat([{one_line}])",
            f"{name} = {torch}.cat(\n{indent}[{one_line}]\n)",
            f"{name} = {torch}.cat(\n{indent}[\n{each}{indent}]\n)",
        ]


def _cst_ancestors(editor: Editor, node: cst.CSTNode) -> list[cst.CSTNode]:
    found = []
    parent = editor.parent(node)
    while parent is not None:
        found.append(parent)
        parent = editor.parent(parent)
    return found


# -- loops over range -------------------------------------------------------------------------
def _range_args(analysis: Semantic, loop: Loop) -> list[ast.expr] | None:
    """The arguments of ``for i in range(...)`` (the builtin); None for other loops."""
    call = loop.iter
    if type(call) is not ast.Call or type(call.func) is not ast.Name:
        return None
    if call.func.id != "range" or analysis.bindings(call.func):
        return None  # not the builtin
    if call.keywords or any(type(a) is ast.Starred for a in call.args):
        return None
    if not 1 <= len(call.args) <= 3:
        return None
    return list(call.args)


def _range_bounds(analysis: Semantic, loop: Loop) -> tuple[ast.expr | None, ast.expr] | None:
    """``(start, stop)`` of ``range([start,] stop)``; None with a step (it skips rows)."""
    args = _range_args(analysis, loop)
    if args is None or len(args) == 3:
        return None
    return (None, args[0]) if len(args) == 1 else (args[0], args[1])


def _is_row_index(elements: list[ast.expr], index: str) -> bool:
    """``x[i]``, ``x[i, :]``, ``x[i, ...]``: the whole row ``i``."""
    first, *rest = elements
    if type(first) is not ast.Name or first.id != index:
        return False
    return all(_is_whole(e) for e in rest)


def _is_whole(element: ast.expr) -> bool:
    if type(element) is ast.Slice:
        return element.lower is None and element.upper is None and element.step is None
    return type(element) is ast.Constant and element.value is Ellipsis


def _is_int(expr: ast.expr) -> bool:
    return _int_value(expr) is not None


def _int_value(expr: ast.expr) -> int | None:
    """The value of an integer literal (LibCST's ``Integer``: not ``True``, not ``-1``)."""
    if isinstance(expr, ast.Constant) and type(expr.value) is int:
        return expr.value
    return None


def _nonzero(start: ast.expr | None) -> bool:
    return start is not None and not _is_zero(start)


# -- static sizes ---------------------------------------------------------------------------
def _measured_tensor(analysis: Semantic, expr: ast.expr) -> ast.Name | None:
    """The ``x`` of ``len(x)``, ``x.shape[0]``, ``x.size(0)``, ``x.size()[0]``."""
    if type(expr) is ast.Call and type(expr.func) is ast.Name:
        arguments = call_arguments(expr)
        if expr.func.id == "len" and len(arguments) == 1:
            value = argument_value(arguments[0])
            return value if type(value) is ast.Name else None
        return None
    if type(expr) is ast.Call and type(expr.func) is ast.Attribute:
        arguments = call_arguments(expr)
        if expr.func.attr == "size" and len(arguments) == 1:
            if _is_zero(argument_value(arguments[0])) and type(expr.func.value) is ast.Name:
                return expr.func.value
        return None
    if type(expr) is ast.Subscript:
        elements = index_elements(analysis, expr)
        if len(elements) != 1 or integer_index(elements[0]) != 0:
            return None
        shape = expr.value
        if type(shape) is ast.Attribute and shape.attr == "shape":
            return shape.value if type(shape.value) is ast.Name else None
        if type(shape) is ast.Call and type(shape.func) is ast.Attribute:
            owner = shape.func.value
            no_arguments = not shape.args and not shape.keywords
            if shape.func.attr == "size" and no_arguments and type(owner) is ast.Name:
                return owner
    return None


def _is_zero(expr: ast.expr) -> bool:
    """The literal ``0`` as written (not ``0x0``, ``False`` or ``0_0``)."""
    if _int_value(expr) != 0:
        return False
    return expr.end_lineno == expr.lineno and expr.end_col_offset == expr.col_offset + 1


def _size(analysis: Semantic, expr: ast.expr, at: ast.AST) -> Size | None:
    """``4`` -> 4; a name bound to ``4`` -> 4; another name -> its binding's identity."""
    value = _int_value(expr)
    if value is not None:
        return value
    if type(expr) is not ast.Name:
        return None
    binding = analysis.reaching_binding(expr, at)
    if binding is None:
        return None
    if binding.kind == "assign" and binding.value is not None:
        bound = _int_value(binding.value)
        if bound is not None:
            return bound
    return (expr.id, binding.start)


def _first_size(analysis: Semantic, expr: ast.expr, at: ast.AST, depth: int = 0) -> Size | None:
    """The number of rows of tensor ``expr`` when it follows from how it was created:
    ``torch.randn(batch_size, 5)``, ``nn.Parameter(...)``, elementwise ops of those."""
    if depth > 10:
        return None
    if type(expr) is ast.Name:
        assigned = assigned_value(analysis, expr, at)
        if assigned is None:
            return None
        value, statement = assigned
        return _first_size(analysis, value, statement, depth + 1)
    if type(expr) is ast.Call:
        name = analysis.call_name(expr)
        positional = [a for a in expr.args if type(a) is not ast.Starred]
        if name in SIZED_FACTORIES | {"torch.full"} and positional:
            size = positional[0]
            if type(size) is ast.List or type(size) is ast.Tuple:
                return _size(analysis, argument_value(size.elts[0]), at) if size.elts else None
            return _size(analysis, size, at)
        if (name in LIKE_FACTORIES or name == "torch.nn.Parameter") and positional:
            return _first_size(analysis, positional[0], at, depth + 1)
    op = analysis.tensor_op(expr, at)
    if op is None or op[0] not in POINTWISE_OPS:
        return None
    sizes = {
        _first_size(analysis, o, at, depth + 1)
        for o in op[1]
        if not is_number_literal(o) and not _is_whole_reduction(analysis, o, at)
    }
    return sizes.pop() if len(sizes) == 1 else None


def _is_whole_reduction(analysis: Semantic, expr: ast.expr, at: ast.AST) -> bool:
    """``x.max()``, ``torch.sum(x)``: a 0-d tensor that broadcasts against anything."""
    if type(expr) is not ast.Call:
        return False
    op = analysis.tensor_op(expr, at)
    return op is not None and op[0] in REDUCTIONS and len(op[1]) == 1


# -- code helpers -------------------------------------------------------------------------------
def _code(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node)


def _header_whitespace(loop: cst.For) -> cst.TrailingWhitespace:
    body = loop.body
    if isinstance(body, cst.SimpleStatementSuite):
        return body.trailing_whitespace
    return cst.ensure_type(body, cst.IndentedBlock).header
