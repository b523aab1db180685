"""GF404 cat-in-loop."""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from gradfix.analysis import Binding, FileAnalysis, normalized_code
from gradfix.rebuild import names_in
from gradfix.rule import Edit, Fix, FixAvailability, FixSafety, Invalid, Rule, Valid
from gradfix.torch_facts import FACTORIES

#: The torch functions that join tensors along an existing dimension.
CAT_FUNCTIONS = frozenset({"torch.cat", "torch.concat", "torch.concatenate"})
#: Legacy constructors that make an empty 1-D float tensor when called without data.
LEGACY_CONSTRUCTORS = frozenset(
    f"torch.{n}" for n in "Tensor FloatTensor DoubleTensor HalfTensor LongTensor".split()
)
LOOPS = (cst.For, cst.While)
SCOPES = (cst.FunctionDef, cst.Lambda, cst.ClassDef)


@dataclass(frozen=True)
class Growth:
    """``out = torch.cat((out, row), ...)`` inside ``loop``; ``prepend`` for ``(row, out)``."""

    assign: cst.Assign
    call: cst.Call
    name: str
    row: cst.BaseExpression
    prepend: bool
    loop: cst.For | cst.While  # the outermost loop the accumulation runs through
    start: Binding | None  # the binding of ``out`` before the loop
    first_row: cst.If | None  # ``if out is None: out = row else: out = torch.cat(...)``


class CatInLoop(Rule):
    """
    ## What it does
    Finds a tensor grown by concatenation inside a loop, `out = torch.cat((out, row))`
    (also `torch.cat([out, row], dim=1)`, the prepending `torch.cat((row, out))`, and the
    `if out is None: out = row else: ...` start), and collects the pieces in a list that is
    concatenated once after the loop.

    ## Why is this bad?
    Every `torch.cat` copies everything gathered so far: n iterations copy O(n²) elements
    and allocate n tensors of growing size, where one `torch.cat` of a list copies each row
    once. The usual start `out = torch.tensor([])` works only through a legacy
    special case of `torch.cat` that skips empty 1-D tensors, and it is a float32 tensor
    that silently promotes integer or half-precision rows to float32. A loop that reads the
    growing tensor in every iteration (autoregressive decoding: `model(ids)` then
    `ids = torch.cat([ids, next_id], -1)`) needs it and is not reported.

    ## Example
    ```python
    out = torch.tensor([])
    for i in range(batch_size):
        row = (x[i] / x[i].sum()).unsqueeze(dim=0)
        out = torch.cat((out, row), dim=0)
    ```

    ## Use instead
    ```python
    out_rows = []
    for i in range(batch_size):
        row = (x[i] / x[i].sum()).unsqueeze(dim=0)
        out_rows.append(row)
    out = torch.cat(out_rows, dim=0)
    ```
    A loop that starts from a first row (`out = first`) starts the list with it:
    `out_rows = [first]`. A prepending loop appends and reverses once:
    `torch.cat(out_rows[::-1])`.

    ## Fix safety
    Safe when the loop starts from a first row, or from `None` with the
    `if out is None` branch and a loop that provably runs (a `range` of literal bounds or a
    literal list): the single `torch.cat` gives the same values, dtype and gradients.
    Unsafe from an empty tensor (`torch.tensor([])`, `torch.Tensor()`, `torch.empty(0)`):
    its float32 dtype takes part in type promotion, and when the loop does not run the
    original keeps the empty tensor where `torch.cat([])` raises. Also unsafe from `None`
    when the loop may not run. Reported without a fix when the start is not a statement of
    its own just before the loop (same block, `out` unused in between), when the row reads
    `out` (`out.new_zeros(...)`), when the loop has an `else`, when `out` is also bound
    another way inside the loop, or when the `dim` changes inside the loop.
    """

    code = "GF404"
    name = "cat-in-loop"
    message = (
        "Tensor grown with torch.cat inside a loop: every iteration copies all rows so far "
        "(O(n²)); collect the rows in a list and concatenate once after the loop"
    )
    fix_safety = FixSafety.SAFE
    fix_availability = FixAvailability.SOMETIMES
    fix_safeties = (FixSafety.SAFE, FixSafety.UNSAFE)
    prefilter = ("cat(", "concat")

    VALID = [
        Valid(
            """
            import torch
            from torch import nn
            model = nn.Linear(4, 4)
            ids = torch.zeros(1, 4)
            for step in range(8):
                nxt = model(ids)[-1:]
                ids = torch.cat([ids, nxt], dim=0)  # read by the model on every step
            """
        ),
        Valid(
            """
            import torch
            rows = []
            for i in range(4):
                rows.append(torch.rand(1, 3))
            out = torch.cat(rows, dim=0)
            pair = torch.cat((out, out))  # not in a loop
            """
        ),
        Valid(
            """
            import torch
            state = torch.zeros(2)
            for i in range(3):
                state = torch.cat((state[1:], torch.rand(1)))  # a sliding window, not growth
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            x = torch.rand(3, 4, requires_grad=True)
            out = torch.tensor([])
            for i in range(3):
                row = (x[i] / x[i].sum()).unsqueeze(dim=0)
                out = torch.cat((out, row), dim=0)
            """,
            """
            import torch
            x = torch.rand(3, 4, requires_grad=True)
            out_rows = []
            for i in range(3):
                row = (x[i] / x[i].sum()).unsqueeze(dim=0)
                out_rows.append(row)
            out = torch.cat(out_rows, dim=0)
            """,
        ),
        Invalid(
            """
            import torch as th

            def encode(layers, h):
                feats = h[:, :1]  # the first feature
                for layer in layers:
                    h = layer(h)
                    feats = th.cat([feats, h[:, :1]], 1)
                return feats
            """,
            """
            import torch as th

            def encode(layers, h):
                feats_parts = [h[:, :1]]  # the first feature
                for layer in layers:
                    h = layer(h)
                    feats_parts.append(h[:, :1])
                feats = th.cat(feats_parts, 1)
                return feats
            """,
        ),
        Invalid(
            """
            import torch
            history = None
            for t in range(5):
                frame = torch.full((1, 2), float(t))
                if history is None:
                    history = frame
                else:
                    history = torch.cat((frame, history))
            """,
            """
            import torch
            history_rows = []
            for t in range(5):
                frame = torch.full((1, 2), float(t))
                history_rows.append(frame)
            history = torch.cat(history_rows[::-1])
            """,
        ),
        Invalid(
            """
            import torch
            out = torch.tensor([])
            for i in range(3):
                if i == 0:
                    out = torch.rand(1, 2)  # restarts the accumulation
                out = torch.cat((out, torch.rand(1, 2)))
            """,
            report_only=True,
        ),
    ]

    def visit_Assign(self, node: cst.Assign) -> None:
        growth = _find_growth(self.analysis, node)
        if growth is None or _read_elsewhere(self.analysis, growth):
            return
        message = (
            f"`{growth.name}` grows by `torch.cat` inside a loop: every iteration copies all "
            "rows so far (O(n²)); append the rows to a list and concatenate once after the loop"
        )
        self.report(node, message, fix=_ListFix(self, growth).build())


# -- finding the growth --------------------------------------------------------------------
def _find_growth(analysis: FileAnalysis, node: cst.Assign) -> Growth | None:
    if len(node.targets) != 1 or not isinstance(node.targets[0].target, cst.Name):
        return None
    name = node.targets[0].target.value
    call = node.value
    if not isinstance(call, cst.Call) or analysis.call_name(call) not in CAT_FUNCTIONS:
        return None
    if not call.args or call.args[0].keyword is not None or call.args[0].star:
        return None
    if any(a.keyword is not None and a.keyword.value == "out" for a in call.args):
        return None
    pieces = call.args[0].value
    if not isinstance(pieces, (cst.List, cst.Tuple)) or len(pieces.elements) != 2:
        return None
    if any(isinstance(e, cst.StarredElement) for e in pieces.elements):
        return None
    first, second = (e.value for e in pieces.elements)
    own = [isinstance(e, cst.Name) and e.value == name for e in (first, second)]
    if own.count(True) != 1:
        return None
    accumulated = cst.ensure_type(first if own[0] else second, cst.Name)
    innermost = _accumulating_loop(analysis, node, None, innermost=True)
    if innermost is None:
        return None
    # the value ``out`` has when the loop is entered (later bindings inside are restarts)
    start = analysis.reaching_binding(accumulated, innermost)
    loop = _accumulating_loop(analysis, node, start)
    if loop is None:
        return None
    row, prepend = (second, False) if own[0] else (first, True)
    first_row = _first_row_branch(analysis, node, name, row, start)
    return Growth(node, call, name, row, prepend, loop, start, first_row)


def _accumulating_loop(
    analysis: FileAnalysis, node: cst.CSTNode, start: Binding | None, innermost: bool = False
) -> cst.For | cst.While | None:
    """The outermost loop around ``node`` (in its scope) that does not contain the start
    (with ``innermost``: the nearest loop)."""
    found: cst.For | cst.While | None = None
    for ancestor in analysis.ancestors(node):
        if isinstance(ancestor, SCOPES):
            break
        if isinstance(ancestor, LOOPS):
            if start is not None and analysis.contains(ancestor, start.node):
                break
            found = ancestor
            if innermost:
                break
    return found


def _first_row_branch(
    analysis: FileAnalysis,
    node: cst.Assign,
    name: str,
    row: cst.BaseExpression,
    start: Binding | None,
) -> cst.If | None:
    """``if out is None: out = row`` / ``else: out = torch.cat(...)`` around ``node``, when
    ``out`` starts as None."""
    if start is None or not isinstance(start.value, cst.Name) or start.value.value != "None":
        return None
    line = analysis.parent(node)
    block = analysis.parent(line) if line is not None else None
    owner = analysis.parent(block) if block is not None else None
    branch = analysis.parent(owner) if isinstance(owner, cst.Else) else owner
    if not isinstance(branch, cst.If) or branch.orelse is None:
        return None
    if isinstance(branch.orelse, cst.If):
        return None  # elif
    test = _none_test(branch.test, name)
    if test is None:
        return None
    cat_block = branch.orelse.body if test == "is" else branch.body
    first_block = branch.body if test == "is" else branch.orelse.body
    if _only_small(cat_block) is not node:
        return None
    first = _only_small(first_block)
    if not isinstance(first, cst.Assign) or len(first.targets) != 1:
        return None
    target = first.targets[0].target
    if not isinstance(target, cst.Name) or target.value != name:
        return None
    return branch if normalized_code(first.value) == normalized_code(row) else None


def _none_test(test: cst.BaseExpression, name: str) -> str | None:
    """'is' for ``name is None``, 'is not' for ``name is not None``."""
    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
        return None
    target = test.comparisons[0]
    if not isinstance(test.left, cst.Name) or test.left.value != name:
        return None
    if not isinstance(target.comparator, cst.Name) or target.comparator.value != "None":
        return None
    if isinstance(target.operator, cst.Is):
        return "is"
    return "is not" if isinstance(target.operator, cst.IsNot) else None


def _read_elsewhere(analysis: FileAnalysis, growth: Growth) -> bool:
    """The loop uses the growing tensor besides growing it: it needs the tensor itself."""
    allowed = {id(n) for n in names_in(growth.assign)}
    if growth.first_row is not None:
        allowed |= {id(n) for n in names_in(growth.first_row.test)}
        allowed |= {id(n) for n in names_in(growth.first_row) if _is_target(analysis, n)}
    for name in names_in(growth.loop):
        if name.value != growth.name or id(name) in allowed:
            continue
        if not _is_target(analysis, name):
            return True
    return False


def _is_target(analysis: FileAnalysis, name: cst.Name) -> bool:
    parent = analysis.parent(name)
    return isinstance(parent, cst.AssignTarget) and parent.target is name


# -- the fix ---------------------------------------------------------------------------------
class _ListFix:
    """Collect the rows in a list; one ``torch.cat`` after the loop."""

    def __init__(self, rule: CatInLoop, growth: Growth) -> None:
        self.rule = rule
        self.analysis = rule.analysis
        self.growth = growth

    def build(self) -> Fix | None:
        growth, analysis = self.growth, self.analysis
        start = growth.start
        if start is None or growth.loop.orelse is not None or self._rebound_in_loop():
            return None
        if any(n.value == growth.name for n in names_in(growth.row)):
            return None  # ``torch.cat([out, out.new_zeros(...)])``: the row needs the tensor
        if not self._start_is_just_before_loop(start) or not self._dim_is_invariant():
            return None
        kind = _start_kind(analysis, start)
        if kind == "none" and growth.first_row is None:
            return None  # ``torch.cat((None, row))`` raises: not an accumulation that works
        rows = self._list_name()
        initial = [] if kind in ("empty", "none") or start.value is None else [start.value]
        safe = kind == "tensor" or (kind == "none" and _runs_at_least_once(analysis, growth.loop))
        start_assign = cst.ensure_type(start.node, cst.Assign)
        new_start = start_assign.with_changes(
            targets=[start_assign.targets[0].with_changes(target=cst.Name(rows))],
            value=cst.List([cst.Element(v) for v in initial]),
        )
        edits = [Edit(start.node, new_start), Edit(growth.loop, self._loop_then_cat(rows))]
        return self.rule.fix(
            edits,
            f"Append to a list `{rows}` and concatenate once after the loop",
            safety=None if safe else FixSafety.UNSAFE,
        )

    def _rebound_in_loop(self) -> bool:
        """``out`` is bound in the loop other than by the growth (and its first-row branch)."""
        growth = self.growth
        allowed = {id(n) for n in names_in(growth.assign)}
        if growth.first_row is not None:
            allowed |= {id(n) for n in names_in(growth.first_row)}
        return any(n.value == growth.name and id(n) not in allowed for n in names_in(growth.loop))

    def _start_is_just_before_loop(self, start: Binding) -> bool:
        """``out = <start>`` is a one-statement line of the loop's block, and nothing between
        it and the loop mentions ``out``."""
        if not isinstance(start.node, cst.Assign) or len(start.node.targets) != 1:
            return False
        line = self.analysis.parent(start.node)
        if not isinstance(line, cst.SimpleStatementLine) or len(line.body) != 1:
            return False
        if self.analysis.parent(line) is not self.analysis.parent(self.growth.loop):
            return False
        scope = self.analysis.scope_of(self.growth.loop).node
        between = range(self.analysis.end_index(line) + 1, self.analysis.index(self.growth.loop))
        return not any(
            n.value == self.growth.name and self.analysis.index(n) in between
            for n in names_in(scope)
        )

    def _dim_is_invariant(self) -> bool:
        """The ``dim`` argument does not depend on names bound inside the loop."""
        loop = self.growth.loop
        for arg in self.growth.call.args[1:]:
            for name in names_in(arg.value):
                binding = self.analysis.reaching_binding(name)
                if binding is not None and self.analysis.contains(loop, binding.node):
                    return False
        return True

    def _list_name(self) -> str:
        """``out_rows`` (``out_parts`` when joining along another dim), not yet used."""
        dims = [a.value for a in self.growth.call.args[1:]]
        along_rows = not dims or (isinstance(dims[0], cst.Integer) and dims[0].value == "0")
        base = f"{self.growth.name}_{'rows' if along_rows else 'parts'}"
        used = {n.value for n in names_in(self.analysis.module)}
        candidate, suffix = base, 1
        while candidate in used:
            suffix += 1
            candidate = f"{base}{suffix}"
        return candidate

    def _loop_then_cat(self, rows: str) -> cst.FlattenSentinel[cst.BaseStatement]:
        growth = self.growth
        append = cst.Expr(
            cst.Call(cst.Attribute(cst.Name(rows), cst.Name("append")), [cst.Arg(growth.row)])
        )
        old: cst.CSTNode = growth.assign
        new: cst.CSTNode = append
        if growth.first_row is not None:  # the whole ``if out is None`` becomes the append
            old = growth.first_row
            new = cst.SimpleStatementLine([append], leading_lines=growth.first_row.leading_lines)
        loop = growth.loop.deep_replace(old, new)
        pieces: cst.BaseExpression = cst.Name(rows)
        if growth.prepend:
            minus_one = cst.UnaryOperation(cst.Minus(), cst.Integer("1"))
            reverse = cst.SubscriptElement(cst.Slice(None, None, step=minus_one))
            pieces = cst.Subscript(cst.Name(rows), [reverse])
        first_arg = growth.call.args[0].with_changes(value=pieces)
        joined = growth.call.with_changes(args=[first_arg, *growth.call.args[1:]])
        after = cst.SimpleStatementLine(
            [cst.Assign([cst.AssignTarget(cst.Name(growth.name))], joined)]
        )
        assert isinstance(loop, (cst.For, cst.While))  # deep_replace keeps the node's type
        return cst.FlattenSentinel([loop, after])


def _start_kind(analysis: FileAnalysis, start: Binding) -> str:
    """'none' for ``None``, 'empty' for an empty tensor, 'tensor' for a first row."""
    value = start.value
    if isinstance(value, cst.Name) and value.value == "None":
        return "none"
    if isinstance(value, cst.Call) and _is_empty_tensor(analysis, value):
        return "empty"
    return "tensor"


def _is_empty_tensor(analysis: FileAnalysis, call: cst.Call) -> bool:
    """``torch.tensor([])``, ``torch.Tensor()``, ``torch.empty(0)``, ``torch.zeros(0, d)``."""
    name = analysis.call_name(call)
    positional = [a.value for a in call.args if a.keyword is None and not a.star]
    if name in LEGACY_CONSTRUCTORS and not positional:
        return True
    if name in LEGACY_CONSTRUCTORS | {"torch.tensor", "torch.as_tensor"} and positional:
        data = positional[0]
        return isinstance(data, (cst.List, cst.Tuple)) and not data.elements
    if name in FACTORIES and positional:
        size = positional[0]
        if isinstance(size, (cst.List, cst.Tuple)) and size.elements:
            size = size.elements[0].value
        return isinstance(size, cst.Integer) and size.value == "0"
    return False


def _runs_at_least_once(analysis: FileAnalysis, loop: cst.For | cst.While) -> bool:
    """``for ... in range(3)``, ``range(1, n_literal)``, or a non-empty literal list."""
    if not isinstance(loop, cst.For):
        return False
    iterable = loop.iter
    if isinstance(iterable, (cst.List, cst.Tuple)):
        return bool(iterable.elements)
    if not isinstance(iterable, cst.Call) or not isinstance(iterable.func, cst.Name):
        return False
    if iterable.func.value != "range" or analysis.bindings(iterable.func):
        return False
    bounds = [_integer_value(analysis, a.value, loop) for a in iterable.args]
    if None in bounds or not 1 <= len(bounds) <= 2 or any(a.keyword for a in iterable.args):
        return False
    low, high = (0, bounds[0]) if len(bounds) == 1 else (bounds[0], bounds[1])
    return low is not None and high is not None and high > low


def _integer_value(analysis: FileAnalysis, expr: cst.BaseExpression, at: cst.CSTNode) -> int | None:
    """``3``, or a name bound to ``3``."""
    if isinstance(expr, cst.Name):
        binding = analysis.reaching_binding(expr, at)
        if binding is None or binding.kind != "assign" or binding.value is None:
            return None
        expr = binding.value
    return int(expr.evaluated_value) if isinstance(expr, cst.Integer) else None


def _only_small(block: cst.BaseSuite) -> cst.BaseSmallStatement | None:
    if isinstance(block, cst.SimpleStatementSuite):
        return block.body[0] if len(block.body) == 1 else None
    body = cst.ensure_type(block, cst.IndentedBlock).body
    if len(body) != 1 or not isinstance(body[0], cst.SimpleStatementLine):
        return None
    return body[0].body[0] if len(body[0].body) == 1 else None


def _code(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node)
