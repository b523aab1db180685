"""GF203 row-loop-inplace."""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from gradfix.analysis import (
    REDUCTIONS,
    Binding,
    FileAnalysis,
    is_number_literal,
    normalized_code,
)
from gradfix.rebuild import (
    POINTWISE_OPS,
    SelfReads,
    assigned_value,
    integer_index,
    may_alias,
    names_in,
    rebindable,
)
from gradfix.rule import INDEX_ASSIGNMENT, Fix, FixAvailability, FixSafety, Invalid, Rule, Valid
from gradfix.torch_facts import LIKE_FACTORIES, SIZED_FACTORIES

#: Longest line the rewrite writes on one line before wrapping (the usual 100 columns).
MAX_LINE = 100
#: A static size: an integer, or the identity of the binding of a name that holds one.
Size = int | tuple[str, int]


@dataclass(frozen=True)
class RowWrite:
    """``x[i] = value`` in the body of ``for i in range(...)``."""

    loop: cst.For
    assign: cst.Assign
    index: str  # the loop variable
    base: cst.Name  # ``x``
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
    name = "row-loop-inplace"
    message = (
        "Loop writes rows of a tensor that requires grad from its own rows through an op "
        "that saves them for backward: backward fails with 'modified by an inplace operation'"
    )
    fix_safety = FixSafety.SAFE
    fix_availability = FixAvailability.SOMETIMES
    fix_safeties = (FixSafety.SAFE, FixSafety.UNSAFE)
    prefilter = (INDEX_ASSIGNMENT,)

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

    def visit_Assign(self, node: cst.Assign) -> None:
        write = self._row_write(node)
        if write is None:
            return
        analysis = self.analysis
        base, binding = write.base, write.binding
        if analysis.in_no_grad(node) or analysis.leaf_reason(base, node) is not None:
            return  # leaves raise at the assignment: GF201 leaf-inplace
        if not analysis.is_tensor(base, node) or not analysis.requires_grad(base, node):
            return
        reads = SelfReads(analysis, base.value, binding, write.integers)
        if not reads.saved_in(node.value):
            return
        message = (
            f"`{base.value}[{write.index}] = ...` in a loop reads rows of `{base.value}` "
            "through an op that saves them for backward: backward fails with 'modified by "
            f"an inplace operation'; rebuild `{base.value}` with `torch.stack`"
        )
        self.report(node, message, fix=_RowLoopFix(self, write, reads).build())

    def _row_write(self, node: cst.Assign) -> RowWrite | None:
        """``x[... i ...] = value`` inside ``for i in range(...)`` (the innermost such loop)."""
        if len(node.targets) != 1:
            return None
        target = node.targets[0].target
        if not isinstance(target, cst.Subscript) or not isinstance(target.value, cst.Name):
            return None
        indexed = {n.value for e in target.slice for n in names_in(e)}
        for ancestor in self.analysis.ancestors(node):
            if isinstance(ancestor, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
                return None
            if isinstance(ancestor, cst.For) and isinstance(ancestor.target, cst.Name):
                if ancestor.target.value in indexed:
                    return self._range_write(ancestor, node, target.value)
        return None

    def _range_write(self, loop: cst.For, node: cst.Assign, base: cst.Name) -> RowWrite | None:
        if _range_args(self.analysis, loop) is None:
            return None
        binding = self.analysis.reaching_binding(base, node)
        if binding is None or not isinstance(loop.target, cst.Name):
            return None
        integers = frozenset(
            a.target.value
            for a in self.analysis.ancestors(node)
            if isinstance(a, cst.For)
            and isinstance(a.target, cst.Name)
            and _range_args(self.analysis, a) is not None
        )
        return RowWrite(loop, node, loop.target.value, base, binding, integers)


class _RowLoopFix:
    """The ``torch.stack`` rewrite of one row loop, and how safe it is."""

    def __init__(self, rule: RowLoopInplace, write: RowWrite, reads: SelfReads) -> None:
        self.rule = rule
        self.analysis = rule.analysis
        self.write = write
        self.reads = reads

    def build(self) -> Fix | None:
        write, analysis = self.write, self.analysis
        bounds = _range_bounds(analysis, write.loop)
        if bounds is None or not self._movable():
            return None
        rebinding = self._rebinding_safety()
        if rebinding is None or not self._reads_only_its_row(write.assign.value):
            return None
        start, stop = bounds
        if start is not None and not isinstance(start, cst.Integer):
            return None  # ``x[:start]`` keeps the rows before it only for a start >= 0
        covers = self._covers_rows(stop)
        partial = _nonzero(start) or not covers
        unsafe = (
            rebinding is FixSafety.UNSAFE
            or partial
            or not self._nonempty(stop)
            or self._row_shape(write.assign.value) != "row"
        )
        value = self._rebuilt(start, stop, covers)
        return self.rule.replace(
            write.loop,
            self._statement(value),
            f"Rebuild `{write.base.value}` out of place with "
            f"`torch.{'cat' if partial else 'stack'}`",
            safety=FixSafety.UNSAFE if unsafe else None,
        )

    # -- when the loop can become one expression --------------------------------------------
    def _movable(self) -> bool:
        """The loop is ``for i in range(...): x[i] = value`` and nothing else, with ``x[i]``
        a whole row, and ``i`` is not read after the loop."""
        loop, assign = self.write.loop, self.write.assign
        if loop.orelse is not None or loop.asynchronous is not None:
            return False
        if self.analysis.scope_of(loop).is_class:
            return False  # a comprehension in a class body cannot see the class's names
        target = assign.targets[0].target
        if not isinstance(target, cst.Subscript) or not _is_row_index(target, self.write.index):
            return False
        if _only_statement(loop) is not assign:
            return False
        return not self._index_read_after()

    def _index_read_after(self) -> bool:
        loop = self.write.loop
        scope = self.analysis.scope_of(loop).node
        for read in names_in(scope):
            after = self.analysis.index(read) > self.analysis.end_index(loop)
            if read.value != self.write.index or not after:
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
        if may_alias(self.analysis, loop, base.value, binding):
            return FixSafety.UNSAFE
        return FixSafety.SAFE

    def _reads_only_its_row(self, value: cst.BaseExpression) -> bool:
        """Every read of ``x`` in ``value`` is the row being written: no recurrence, no
        whole-tensor read that would see rows already updated, no alias of ``x``."""
        row = normalized_code(self.write.assign.targets[0].target)
        for name in names_in(value):
            parent = self.analysis.parent(name)
            if name.value == self.write.base.value:
                if not isinstance(parent, cst.Subscript) or normalized_code(parent) != row:
                    return False
            elif name.value != self.write.index and self.reads.is_view(name):
                return False
        return True

    # -- the range ---------------------------------------------------------------------------
    def _covers_rows(self, stop: cst.BaseExpression) -> bool:
        if self._is_length_of_base(stop, self.write.assign):
            return True
        size = _size(self.analysis, stop, self.write.loop)
        rows = _first_size(self.analysis, self.write.base, self.write.assign)
        return size is not None and size == rows

    def _is_length_of_base(self, expr: cst.BaseExpression, at: cst.CSTNode, depth: int = 0) -> bool:
        """``len(x)``, ``x.shape[0]``, ``x.size(0)``, ``x.size()[0]``, or a name bound to one."""
        measured = _measured_tensor(expr)
        if measured is not None:
            return (
                measured.value == self.write.base.value
                and self.analysis.reaching_binding(measured, at) is self.write.binding
            )
        if isinstance(expr, cst.Name) and depth < 2:
            binding = self.analysis.reaching_binding(expr, at)
            if binding is not None and binding.kind == "assign" and binding.value is not None:
                return self._is_length_of_base(binding.value, binding.node, depth + 1)
        return False

    def _nonempty(self, stop: cst.BaseExpression) -> bool:
        size = _size(self.analysis, stop, self.write.loop)
        if isinstance(size, int):
            return size >= 1
        rows = _first_size(self.analysis, self.write.base, self.write.assign)
        return isinstance(rows, int) and rows >= 1 and self._covers_rows(stop)

    # -- the shape of the right-hand side ----------------------------------------------------
    def _row_shape(self, expr: cst.BaseExpression) -> str | None:
        """'row' when ``expr`` has the shape and dtype of ``x[i]``, 'scalar' for numbers and
        whole-row reductions, None when it involves anything else."""
        if is_number_literal(expr):
            return "scalar"
        row = normalized_code(self.write.assign.targets[0].target)
        if isinstance(expr, cst.Subscript) and normalized_code(expr) == row:
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

    def _is_full_reduction(self, expr: cst.BaseExpression) -> bool:
        """``row.sum()``, ``torch.sum(row)``: a 0-d tensor of the row's dtype."""
        if not isinstance(expr, cst.Call):
            return False
        op = self.analysis.tensor_op(expr, expr)
        if op is None or op[0] not in REDUCTIONS or len(op[1]) != 1:
            return False
        return self._row_shape(op[1][0]) is not None

    # -- building the replacement -------------------------------------------------------------
    def _rebuilt(
        self, start: cst.BaseExpression | None, stop: cst.BaseExpression, covers: bool
    ) -> list[str]:
        """Layouts of ``x = torch.stack([...])`` (or the ``torch.cat`` form), flat first."""
        write = self.write
        torch = self.analysis.torch_alias() or "torch"
        name, index = write.base.value, write.index
        element, iterable = _code(write.assign.value), _code(write.loop.iter)
        indent = self.analysis.module.default_indent
        flat = f"[{element} for {index} in {iterable}]"
        exploded = f"[\n{indent * 2}{element}\n{indent * 2}for {index} in {iterable}\n{indent}]"
        if not _nonzero(start) and covers:
            return [
                f"{name} = {torch}.stack({flat})",
                f"{name} = {torch}.stack(\n{indent}{flat}\n)",
                f"{name} = {torch}.stack(\n{indent}{exploded}\n)",
            ]
        pieces = [f"{torch}.stack({flat})"]
        if start is not None and _nonzero(start):
            pieces.insert(0, f"{name}[:{_code(start)}]")
        if not covers:
            pieces.append(f"{name}[{_code(stop)}:]")
        one_line = ", ".join(pieces)
        each = "".join(f"{indent * 2}{piece},\n" for piece in pieces)
        return [
            f"{name} = {torch}.cat([{one_line}])",
            f"{name} = {torch}.cat(\n{indent}[{one_line}]\n)",
            f"{name} = {torch}.cat(\n{indent}[\n{each}{indent}]\n)",
        ]

    def _statement(self, layouts: list[str]) -> cst.SimpleStatementLine:
        """The first layout that fits the line (a multi-line right-hand side keeps its own
        layout), with the loop's comments: the header's above, the body's kept."""
        loop, assign = self.write.loop, self.write.assign
        depth = sum(isinstance(a, cst.IndentedBlock) for a in self.analysis.ancestors(loop))
        margin = MAX_LINE - depth * len(self.analysis.module.default_indent)
        fitting = [t for t in layouts if max(len(line) for line in t.split("\n")) <= margin]
        multiline_value = "\n" in _code(assign.value)
        text = layouts[0] if multiline_value or not fitting else fitting[0]
        config = self.analysis.module.config_for_parsing
        statement = cst.ensure_type(cst.parse_statement(text, config), cst.SimpleStatementLine)
        line = self.analysis.parent(assign)
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


# -- loops over range -------------------------------------------------------------------------
def _range_args(analysis: FileAnalysis, loop: cst.For) -> list[cst.BaseExpression] | None:
    """The arguments of ``for i in range(...)`` (the builtin); None for other loops."""
    call = loop.iter
    if not isinstance(call, cst.Call) or not isinstance(call.func, cst.Name):
        return None
    if call.func.value != "range" or analysis.bindings(call.func):
        return None  # not the builtin
    if any(a.keyword is not None or a.star for a in call.args) or not 1 <= len(call.args) <= 3:
        return None
    return [a.value for a in call.args]


def _range_bounds(
    analysis: FileAnalysis, loop: cst.For
) -> tuple[cst.BaseExpression | None, cst.BaseExpression] | None:
    """``(start, stop)`` of ``range([start,] stop)``; None with a step (it skips rows)."""
    args = _range_args(analysis, loop)
    if args is None or len(args) == 3:
        return None
    return (None, args[0]) if len(args) == 1 else (args[0], args[1])


def _only_statement(loop: cst.For) -> cst.BaseSmallStatement | None:
    body = loop.body
    if isinstance(body, cst.SimpleStatementSuite):
        return body.body[0] if len(body.body) == 1 else None
    if len(body.body) != 1 or not isinstance(body.body[0], cst.SimpleStatementLine):
        return None
    line = body.body[0]
    return line.body[0] if len(line.body) == 1 else None


def _is_row_index(target: cst.Subscript, index: str) -> bool:
    """``x[i]``, ``x[i, :]``, ``x[i, ...]``: the whole row ``i``."""
    first, *rest = target.slice
    item = first.slice
    if not isinstance(item, cst.Index) or not isinstance(item.value, cst.Name):
        return False
    if item.value.value != index:
        return False
    return all(_is_whole(e.slice) for e in rest)


def _is_whole(item: cst.BaseSlice) -> bool:
    if isinstance(item, cst.Slice):
        return item.lower is None and item.upper is None and item.step is None
    return isinstance(item, cst.Index) and isinstance(item.value, cst.Ellipsis)


def _nonzero(start: cst.BaseExpression | None) -> bool:
    return start is not None and not (isinstance(start, cst.Integer) and start.value == "0")


# -- static sizes ---------------------------------------------------------------------------
def _measured_tensor(expr: cst.BaseExpression) -> cst.Name | None:
    """The ``x`` of ``len(x)``, ``x.shape[0]``, ``x.size(0)``, ``x.size()[0]``."""
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name):
        if expr.func.value == "len" and len(expr.args) == 1:
            value = expr.args[0].value
            return value if isinstance(value, cst.Name) else None
        return None
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute):
        if expr.func.attr.value == "size" and len(expr.args) == 1:
            if _is_zero(expr.args[0].value) and isinstance(expr.func.value, cst.Name):
                return expr.func.value
        return None
    if isinstance(expr, cst.Subscript) and len(expr.slice) == 1:
        if integer_index(expr.slice[0].slice) != 0:
            return None
        shape = expr.value
        if isinstance(shape, cst.Attribute) and shape.attr.value == "shape":
            return shape.value if isinstance(shape.value, cst.Name) else None
        if isinstance(shape, cst.Call) and isinstance(shape.func, cst.Attribute):
            owner = shape.func.value
            if shape.func.attr.value == "size" and not shape.args and isinstance(owner, cst.Name):
                return owner
    return None


def _is_zero(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.Integer) and expr.value == "0"


def _size(analysis: FileAnalysis, expr: cst.BaseExpression, at: cst.CSTNode) -> Size | None:
    """``4`` -> 4; a name bound to ``4`` -> 4; another name -> its binding's identity."""
    if isinstance(expr, cst.Integer):
        return int(expr.evaluated_value)
    if not isinstance(expr, cst.Name):
        return None
    binding = analysis.reaching_binding(expr, at)
    if binding is None:
        return None
    if binding.kind == "assign" and isinstance(binding.value, cst.Integer):
        return int(binding.value.evaluated_value)
    return (expr.value, binding.start)


def _first_size(
    analysis: FileAnalysis, expr: cst.BaseExpression, at: cst.CSTNode, depth: int = 0
) -> Size | None:
    """The number of rows of tensor ``expr`` when it follows from how it was created:
    ``torch.randn(batch_size, 5)``, ``nn.Parameter(...)``, elementwise ops of those."""
    if depth > 10:
        return None
    if isinstance(expr, cst.Name):
        assigned = assigned_value(analysis, expr, at)
        if assigned is None:
            return None
        value, statement = assigned
        return _first_size(analysis, value, statement, depth + 1)
    if isinstance(expr, cst.Call):
        name = analysis.call_name(expr)
        positional = [a.value for a in expr.args if a.keyword is None and not a.star]
        if name in SIZED_FACTORIES | {"torch.full"} and positional:
            size = positional[0]
            if isinstance(size, (cst.List, cst.Tuple)):
                return _size(analysis, size.elements[0].value, at) if size.elements else None
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


def _is_whole_reduction(analysis: FileAnalysis, expr: cst.BaseExpression, at: cst.CSTNode) -> bool:
    """``x.max()``, ``torch.sum(x)``: a 0-d tensor that broadcasts against anything."""
    if not isinstance(expr, cst.Call):
        return False
    op = analysis.tensor_op(expr, at)
    return op is not None and op[0] in REDUCTIONS and len(op[1]) == 1


# -- code helpers -------------------------------------------------------------------------------
def _code(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node)


def _slice(
    name: str, lower: cst.BaseExpression | None, upper: cst.BaseExpression | None
) -> cst.Subscript:
    return cst.Subscript(
        cst.Name(name), [cst.SubscriptElement(cst.Slice(lower=lower, upper=upper))]
    )


def _header_whitespace(loop: cst.For) -> cst.TrailingWhitespace:
    body = loop.body
    if isinstance(body, cst.SimpleStatementSuite):
        return body.trailing_whitespace
    return cst.ensure_type(body, cst.IndentedBlock).header
