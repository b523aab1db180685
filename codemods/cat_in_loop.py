"""GF404 cat-in-loop."""

from __future__ import annotations

import ast
from dataclasses import dataclass

import libcst as cst

from gradfix.edits import Editor
from gradfix.rule import Edit, FixAvailability, FixPlan, FixSafety, Invalid, Rule, Valid
from gradfix.semantic import Binding, Semantic
from gradfix.semantic.syntax import (
    VariableNames,
    argument_value,
    arguments_in_source_order,
    is_int_literal,
    is_none,
    literal_items,
    normalized_code,
)
from gradfix.torch_facts import FACTORIES

#: The torch functions that join tensors along an existing dimension.
CAT_FUNCTIONS = frozenset({"torch.cat", "torch.concat", "torch.concatenate"})
#: Legacy constructors that make an empty 1-D float tensor when called without data.
LEGACY_CONSTRUCTORS = frozenset(
    f"torch.{n}" for n in "Tensor FloatTensor DoubleTensor HalfTensor LongTensor".split()
)
Loop = ast.For | ast.AsyncFor | ast.While
LOOPS = (ast.For, ast.AsyncFor, ast.While)
SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


@dataclass(frozen=True)
class Growth:
    """``out = torch.cat((out, row), ...)`` inside ``loop``; ``prepend`` for ``(row, out)``."""

    assign: ast.Assign
    call: ast.Call
    name: str
    row: ast.expr
    prepend: bool
    loop: Loop  # the outermost loop the accumulation runs through
    start: Binding | None  # the binding of ``out`` before the loop
    first_row: ast.If | None  # ``if out is None: out = row else: out = torch.cat(...)``


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
    `ids = torch.cat([ids, next_id], -1)`) needs it and is not reported. Nor is growth too
    cheap to be worth a rewrite: one selected id (`argmax`, `multinomial`, `topk` indices)
    per step of a `range` or `while` loop (a decoding loop with a KV cache reads only the
    new id; its forward pass dwarfs copying a few integers), and a one-time gather over a
    model's `parameters()` (as many iterations as the model has tensors, not per batch).

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
    assign_targets = frozenset({ast.Name})  # visit_Assign: ``out = torch.cat([out, row])``
    needs = frozenset(name.rpartition(".")[2] for name in CAT_FUNCTIONS)
    name = "cat-in-loop"
    synopsis = (
        "Finds a tensor grown by `torch.cat` inside a loop, O(n²) copies, and rewrites "
        "it to a list appended in the loop and one `torch.cat` after it."
    )
    message = (
        "Tensor grown with torch.cat inside a loop: every iteration copies all rows so far "
        "(O(n²)); collect the rows in a list and concatenate once after the loop"
    )
    fix_safety = FixSafety.SAFE
    fix_availability = FixAvailability.SOMETIMES
    fix_safeties = (FixSafety.SAFE, FixSafety.UNSAFE)

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
        Valid(
            """
            import torch
            from torch import nn

            @torch.no_grad()
            def greedy(step, tokens, n_new):
                logits = step(tokens)  # the prompt fills the cache once
                for _ in range(n_new):
                    picked = logits[:, -1].argmax(dim=-1, keepdim=True)
                    tokens = torch.cat((tokens, picked), dim=1)  # one id per step
                    logits = step(picked)  # reads only the new id
                return tokens
            """
        ),
        Valid(
            """
            import torch
            _, first = torch.topk(torch.rand(2, 5), k=1)
            chosen = first
            for _ in range(4):
                _, best = torch.rand(2, 5).topk(1)
                chosen = torch.cat([chosen, best.long()], -1)
            """
        ),
        Valid(
            """
            import torch
            from torch import nn
            net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
            flat = torch.Tensor()
            for p in list(net.parameters()):  # once, to plot a histogram of the weights
                flat = torch.cat((flat, p.detach().view(-1)))
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

    def visit_Assign(self, node: ast.Assign) -> None:
        growth = _find_growth(self.analysis, node)
        if growth is None or _read_elsewhere(self.analysis, growth):
            return
        if _is_cheap(self.analysis, growth):
            return
        message = (
            f"`{growth.name}` grows by `torch.cat` inside a loop: every iteration copies all "
            "rows so far (O(n²)); append the rows to a list and concatenate once after the loop"
        )
        self.report(node, message, fix=_ListFix(self, growth).plan())


# -- finding the growth --------------------------------------------------------------------
def _find_growth(analysis: Semantic, node: ast.Assign) -> Growth | None:
    if len(node.targets) != 1 or type(node.targets[0]) is not ast.Name:
        return None
    name = node.targets[0].id
    call = node.value
    if type(call) is not ast.Call or not call.args or type(call.args[0]) is ast.Starred:
        return None  # (a keyword cannot come before a plain positional argument)
    if any(k.arg == "out" for k in call.keywords):
        return None
    items = literal_items(call.args[0])
    if items is None or len(items) != 2:
        return None
    first, second = items
    own = [type(e) is ast.Name and e.id == name for e in (first, second)]
    if own.count(True) != 1:
        return None  # cheap first: most calls pass no pair holding the name
    if analysis.call_name(call) not in CAT_FUNCTIONS:
        return None
    accumulated = first if own[0] else second
    assert type(accumulated) is ast.Name
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
    analysis: Semantic, node: ast.AST, start: Binding | None, innermost: bool = False
) -> Loop | None:
    """The outermost loop around ``node`` (in its scope) that does not contain the start
    (with ``innermost``: the nearest loop)."""
    found: Loop | None = None
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
    analysis: Semantic,
    node: ast.Assign,
    name: str,
    row: ast.expr,
    start: Binding | None,
) -> ast.If | None:
    """``if out is None: out = row`` / ``else: out = torch.cat(...)`` around ``node``, when
    ``out`` starts as None."""
    if start is None or not is_none(start.value):
        return None
    branch = analysis.parent(node)
    if type(branch) is not ast.If or not branch.orelse:
        return None
    if node in branch.body and _on_the_if_line(analysis.source, branch):
        return None  # ``if out is not None: out = ...`` on one line: not recognised before
    test = _none_test(branch.test, name)
    if test is None:
        return None
    cat_block = branch.orelse if test == "is" else branch.body
    first_block = branch.body if test == "is" else branch.orelse
    if _only_statement(cat_block) is not node:
        return None
    first = _only_statement(first_block)
    if type(first) is not ast.Assign or len(first.targets) != 1:
        return None
    target = first.targets[0]
    if type(target) is not ast.Name or target.id != name:
        return None
    return branch if normalized_code(first.value) == normalized_code(row) else None


def _on_the_if_line(source: str, branch: ast.If) -> bool:
    """``if test: statement``: the body follows the colon on its line (a one-line suite)."""
    test, body = branch.test, branch.body[0]
    lines = source.encode("utf-8").splitlines(keepends=True)  # ast columns count bytes
    start = sum(map(len, lines[: (test.end_lineno or 1) - 1])) + (test.end_col_offset or 0)
    end = sum(map(len, lines[: body.lineno - 1])) + body.col_offset
    after_colon = b"".join(lines)[start:end].rpartition(b":")[2]
    return b"\n" not in after_colon and b"\r" not in after_colon


def _none_test(test: ast.expr, name: str) -> str | None:
    """'is' for ``name is None``, 'is not' for ``name is not None``."""
    if type(test) is not ast.Compare or len(test.ops) != 1:
        return None
    if type(test.left) is not ast.Name or test.left.id != name:
        return None
    if not is_none(test.comparators[0]):
        return None
    if type(test.ops[0]) is ast.Is:
        return "is"
    return "is not" if type(test.ops[0]) is ast.IsNot else None


def _read_elsewhere(analysis: Semantic, growth: Growth) -> bool:
    """The loop uses the growing tensor besides growing it: it needs the tensor itself."""
    name = growth.name
    allowed = {id(n) for n in analysis.name_nodes_in(growth.assign, name)}
    if growth.first_row is not None:
        allowed |= {id(n) for n in analysis.name_nodes_in(growth.first_row.test, name)}
        allowed |= {
            id(n) for n in analysis.name_nodes_in(growth.first_row, name) if _is_target(analysis, n)
        }
    if name in _declared_names(growth.loop):
        return True
    return any(
        id(n) not in allowed and not _is_target(analysis, n)
        for n in analysis.name_nodes_in(growth.loop, name)
    )


# -- cheap growth ----------------------------------------------------------------------------
#: calls whose result is the position of a selected element: one id per row and step
SELECTING_CALLS = frozenset({"argmax", "argmin", "multinomial"})
#: calls whose second result (``values, indices = torch.topk(...)``) are positions
INDEXED_PAIRS = frozenset({"topk", "max", "min", "sort", "kthvalue", "mode"})
#: methods that keep the ids (shape or device changes, integer casts)
ID_PRESERVING = frozenset(
    "unsqueeze view reshape squeeze flatten to long int cuda cpu detach clone".split()
)
#: a module's own tensors and submodules: as many as the model has, not as the data has
MODEL_ENUMERATIONS = frozenset(
    "parameters named_parameters buffers named_buffers children modules".split()
)


def _is_cheap(analysis: Semantic, growth: Growth) -> bool:
    """Growth whose quadratic copy costs nothing worth a rewrite: one selected id per step
    of a ``range`` / ``while`` loop (a decoding loop: ``ids = torch.cat([ids,
    logits.argmax(-1, keepdim=True)], 1)``, the step's forward pass dwarfs copying a few
    integers; ids gathered over a data loader are as many as the data and still count), or
    a one-time gather over a model's parameters (``for p in model.parameters(): flat =
    torch.cat((flat, p.view(-1)))``: as many iterations as the model has tensors, and not
    nested in a loop that runs it per batch)."""
    loop = growth.loop
    if _counts_steps(loop) and _is_selected_ids(analysis, growth.row, growth.assign, depth=0):
        return True
    if not isinstance(loop, (ast.For, ast.AsyncFor)) or not _enumerates_model(loop.iter):
        return False
    return not any(isinstance(a, LOOPS) for a in _ancestors_in_scope(analysis, loop))


def _counts_steps(loop: Loop) -> bool:
    """``while ...`` or ``for _ in range(n)``: steps, not items of a data set or loader."""
    if isinstance(loop, ast.While):
        return True
    iterable = loop.iter
    return (
        type(iterable) is ast.Call
        and type(iterable.func) is ast.Name
        and (iterable.func.id == "range")
    )


def _is_selected_ids(analysis: Semantic, expr: ast.expr, at: ast.AST, depth: int) -> bool:
    """``expr`` holds positions picked by ``argmax`` / ``multinomial`` / ``topk``..., through
    reshapes, casts and names bound to them."""
    if depth > 4:
        return False
    if type(expr) is ast.Subscript:
        return _is_selected_ids(analysis, expr.value, at, depth + 1)
    if type(expr) is ast.Attribute and expr.attr == "indices":
        return _called(analysis, expr.value) in INDEXED_PAIRS
    if type(expr) is ast.Name:
        binding = analysis.reaching_binding(expr, at)
        if binding is None or binding.value is None or binding.kind != "assign":
            return False
        if binding.unpack_index == 1:  # ``_, ids = torch.topk(...)``
            return _called(analysis, binding.value) in INDEXED_PAIRS
        return binding.unpack_index is None and _is_selected_ids(
            analysis, binding.value, binding.node, depth + 1
        )
    if type(expr) is not ast.Call:
        return False
    called = _called(analysis, expr)
    if called in SELECTING_CALLS:
        return True
    if called in ID_PRESERVING and type(expr.func) is ast.Attribute:
        return _is_selected_ids(analysis, expr.func.value, at, depth + 1)
    return False


def _called(analysis: Semantic, expr: ast.expr) -> str | None:
    """The last part of a called name: ``argmax`` for ``torch.argmax(x)`` and ``x.argmax()``."""
    if type(expr) is not ast.Call:
        return None
    if type(expr.func) is ast.Attribute:
        return expr.func.attr
    name = analysis.call_name(expr)
    return name.rpartition(".")[2] if name and name.startswith("torch.") else None


def _enumerates_model(iterable: ast.expr) -> bool:
    """``model.parameters()``, ``list(model.parameters())``, ``net.named_modules()``..."""
    if type(iterable) is ast.Call and type(iterable.func) is ast.Name:
        if iterable.func.id in ("list", "tuple", "enumerate") and len(iterable.args) == 1:
            return _enumerates_model(iterable.args[0])
    return (
        type(iterable) is ast.Call
        and type(iterable.func) is ast.Attribute
        and iterable.func.attr.removeprefix("named_") in MODEL_ENUMERATIONS
    )


def _ancestors_in_scope(analysis: Semantic, node: ast.AST) -> list[ast.AST]:
    found = []
    for ancestor in analysis.ancestors(node):
        if isinstance(ancestor, SCOPES):
            break
        found.append(ancestor)
    return found


def _is_target(analysis: Semantic, name: ast.Name) -> bool:
    parent = analysis.parent(name)
    return type(parent) is ast.Assign and any(t is name for t in parent.targets)


def _declared_names(node: ast.AST) -> set[str]:
    """The names under ``node`` that LibCST spells as ``Name`` nodes and ``ast`` as plain
    strings: ``def``/``class`` names, imported names (the first part of a dotted module),
    ``global``/``nonlocal``, ``except ... as e``, names in ``match`` patterns and type
    parameters. Parameters are not included (nor were they in LibCST's name walk)."""
    found: set[str | None] = set()
    for child in ast.walk(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.add(child.name)
        elif isinstance(child, ast.alias):
            found.update((child.name.split(".")[0], child.asname))
        elif isinstance(child, ast.ImportFrom) and child.module:
            found.add(child.module.split(".")[0])
        elif isinstance(child, (ast.Global, ast.Nonlocal)):
            found.update(child.names)
        elif isinstance(child, ast.ExceptHandler):
            found.add(child.name)
        elif isinstance(child, ast.MatchClass):
            found.update(child.kwd_attrs)
        elif type(child).__name__.startswith(_PATTERN_NAMES):
            found.update((getattr(child, "name", None), getattr(child, "rest", None)))
    return {n for n in found if n}


#: ``match`` patterns and type parameters: their ``name`` / ``rest`` is a bound name.
_PATTERN_NAMES = ("Match", "TypeVar", "ParamSpec")


# -- the fix ---------------------------------------------------------------------------------
class _ListFix:
    """Collect the rows in a list; one ``torch.cat`` after the loop."""

    def __init__(self, rule: CatInLoop, growth: Growth) -> None:
        self.rule = rule
        self.analysis = rule.analysis
        self.growth = growth

    def plan(self) -> FixPlan | None:
        growth, analysis = self.growth, self.analysis
        start = growth.start
        if start is None or growth.loop.orelse or self._rebound_in_loop():
            return None
        if analysis.name_nodes_in(growth.row, growth.name):
            return None  # ``torch.cat([out, out.new_zeros(...)])``: the row needs the tensor
        if not self._start_is_just_before_loop(start) or not self._dim_is_invariant():
            return None
        kind = _start_kind(analysis, start)
        if kind == "none" and growth.first_row is None:
            return None  # ``torch.cat((None, row))`` raises: not an accumulation that works
        rows = self._list_name()
        keep_start = kind not in ("empty", "none") and start.value is not None
        safe = kind == "tensor" or (kind == "none" and _runs_at_least_once(analysis, growth.loop))
        start_node = start.node

        def build(editor: Editor) -> list[Edit]:
            start_assign = cst.ensure_type(editor.node(start_node), cst.Assign)
            initial = [cst.Element(start_assign.value)] if keep_start else []
            new_start = start_assign.with_changes(
                targets=[start_assign.targets[0].with_changes(target=cst.Name(rows))],
                value=cst.List(initial),
            )
            loop = editor.node(growth.loop)
            return [Edit(start_assign, new_start), Edit(loop, _loop_then_cat(editor, growth, rows))]

        return self.rule.plan(
            build,
            f"Append to a list `{rows}` and concatenate once after the loop",
            safety=None if safe else FixSafety.UNSAFE,
        )

    def _rebound_in_loop(self) -> bool:
        """``out`` is bound in the loop other than by the growth (and its first-row branch)."""
        growth, analysis = self.growth, self.analysis
        allowed = {id(n) for n in analysis.name_nodes_in(growth.assign, growth.name)}
        if growth.first_row is not None:
            allowed |= {id(n) for n in analysis.name_nodes_in(growth.first_row, growth.name)}
        if growth.name in _declared_names(growth.loop):
            return True
        return any(id(n) not in allowed for n in analysis.name_nodes_in(growth.loop, growth.name))

    def _start_is_just_before_loop(self, start: Binding) -> bool:
        """``out = <start>`` is a statement of its own line in the loop's block, and nothing
        between it and the loop mentions ``out``."""
        node = start.node
        if type(node) is not ast.Assign or len(node.targets) != 1:
            return False
        block = _block_of(self.analysis, node)
        if block is None or not any(s is self.growth.loop for s in block):
            return False
        position = next(i for i, s in enumerate(block) if s is node)
        if _shares_a_line(block, position):
            return False
        end = next(i for i, s in enumerate(block) if s is self.growth.loop)
        name = self.growth.name
        return not any(
            self.analysis.name_nodes_in(s, name) or name in _declared_names(s)
            for s in block[position + 1 : end]
        )

    def _dim_is_invariant(self) -> bool:
        """The ``dim`` argument does not depend on names bound inside the loop."""
        loop = self.growth.loop
        for arg in arguments_in_source_order(self.growth.call)[1:]:
            names = VariableNames()
            names.visit(argument_value(arg))
            for name in names.names:
                binding = self.analysis.reaching_binding(name)
                if binding is not None and self.analysis.contains(loop, binding.node):
                    return False
        return True

    def _list_name(self) -> str:
        """``out_rows`` (``out_parts`` when joining along another dim), not yet used."""
        dims = [argument_value(a) for a in arguments_in_source_order(self.growth.call)[1:]]
        along_rows = not dims or _is_literal(self.analysis, dims[0], "0")
        base = f"{self.growth.name}_{'rows' if along_rows else 'parts'}"
        module = self.analysis.module
        declared = _declared_names(module)
        candidate, suffix = base, 1
        while candidate in declared or self.analysis.name_nodes_in(module, candidate):
            suffix += 1
            candidate = f"{base}{suffix}"
        return candidate


def _loop_then_cat(
    editor: Editor, growth: Growth, rows: str
) -> cst.FlattenSentinel[cst.BaseStatement]:
    call = cst.ensure_type(editor.node(growth.call), cst.Call)
    # the row from the LibCST call (an ``ast`` range of a parenthesised tuple includes the
    # parentheses, LibCST's does not)
    pieces_node = call.args[0].value
    assert isinstance(pieces_node, (cst.List, cst.Tuple))
    row = pieces_node.elements[0 if growth.prepend else 1].value
    append = cst.Expr(cst.Call(cst.Attribute(cst.Name(rows), cst.Name("append")), [cst.Arg(row)]))
    old: cst.CSTNode = editor.node(growth.assign)
    new: cst.CSTNode = append
    if growth.first_row is not None:  # the whole ``if out is None`` becomes the append
        first_row = cst.ensure_type(editor.node(growth.first_row), cst.If)
        old = first_row
        new = cst.SimpleStatementLine([append], leading_lines=first_row.leading_lines)
    loop = editor.node(growth.loop).deep_replace(old, new)
    pieces: cst.BaseExpression = cst.Name(rows)
    if growth.prepend:
        minus_one = cst.UnaryOperation(cst.Minus(), cst.Integer("1"))
        reverse = cst.SubscriptElement(cst.Slice(None, None, step=minus_one))
        pieces = cst.Subscript(cst.Name(rows), [reverse])
    first_arg = call.args[0].with_changes(value=pieces)
    joined = call.with_changes(args=[first_arg, *call.args[1:]])
    after = cst.SimpleStatementLine([cst.Assign([cst.AssignTarget(cst.Name(growth.name))], joined)])
    assert isinstance(loop, (cst.For, cst.While))  # deep_replace keeps the node's type
    return cst.FlattenSentinel([loop, after])


def _block_of(analysis: Semantic, node: ast.stmt) -> list[ast.stmt] | None:
    """The statement list (a body, an ``orelse``...) that holds ``node``."""
    parent = analysis.parent(node)
    for field in ("body", "orelse", "finalbody"):
        block = getattr(parent, field, None)
        if type(block) is list and any(s is node for s in block):
            return block
    return None


def _shares_a_line(block: list[ast.stmt], position: int) -> bool:
    """``a = 1; out = x``: the statement is not alone on its line."""
    node = block[position]
    before = block[position - 1] if position > 0 else None
    after = block[position + 1] if position + 1 < len(block) else None
    return (before is not None and before.end_lineno == node.lineno) or (
        after is not None and after.lineno == node.end_lineno
    )


def _start_kind(analysis: Semantic, start: Binding) -> str:
    """'none' for ``None``, 'empty' for an empty tensor, 'tensor' for a first row."""
    value = start.value
    if is_none(value):
        return "none"
    if type(value) is ast.Call and _is_empty_tensor(analysis, value):
        return "empty"
    return "tensor"


def _is_empty_tensor(analysis: Semantic, call: ast.Call) -> bool:
    """``torch.tensor([])``, ``torch.Tensor()``, ``torch.empty(0)``, ``torch.zeros(0, d)``."""
    name = analysis.call_name(call)
    positional = [a for a in call.args if type(a) is not ast.Starred]
    if name in LEGACY_CONSTRUCTORS and not positional:
        return True
    if name in LEGACY_CONSTRUCTORS | {"torch.tensor", "torch.as_tensor"} and positional:
        data = positional[0]
        return isinstance(data, (ast.List, ast.Tuple)) and not data.elts
    if name in FACTORIES and positional:
        size = positional[0]
        if isinstance(size, (ast.List, ast.Tuple)) and size.elts:
            size = argument_value(size.elts[0])
        return _is_literal(analysis, size, "0")
    return False


def _runs_at_least_once(analysis: Semantic, loop: Loop) -> bool:
    """``for ... in range(3)``, ``range(1, n_literal)``, or a non-empty literal list."""
    if isinstance(loop, ast.While):
        return False
    iterable = loop.iter
    if isinstance(iterable, (ast.List, ast.Tuple)):
        return bool(iterable.elts)
    if type(iterable) is not ast.Call or type(iterable.func) is not ast.Name:
        return False
    if iterable.func.id != "range" or analysis.bindings(iterable.func):
        return False
    if iterable.keywords:
        return False
    bounds = [_integer_value(analysis, a, loop) for a in iterable.args]
    if not 1 <= len(bounds) <= 2:
        return False
    low, high = (0, bounds[0]) if len(bounds) == 1 else (bounds[0], bounds[1])
    return low is not None and high is not None and high > low


def _integer_value(analysis: Semantic, expr: ast.expr, at: ast.AST) -> int | None:
    """``3``, or a name bound to ``3``."""
    if type(expr) is ast.Name:
        binding = analysis.reaching_binding(expr, at)
        if binding is None or binding.kind != "assign" or binding.value is None:
            return None
        expr = binding.value
    if isinstance(expr, ast.Constant) and type(expr.value) is int:
        return expr.value
    return None


def _is_literal(analysis: Semantic, expr: ast.AST, text: str) -> bool:
    """An integer literal written exactly ``text`` (``0``, not ``00`` nor ``0x0``)."""
    return is_int_literal(expr) and analysis.segment(expr) == text


def _only_statement(block: list[ast.stmt]) -> ast.stmt | None:
    return block[0] if len(block) == 1 else None
