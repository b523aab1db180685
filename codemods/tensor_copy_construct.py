"""GF104 tensor-copy-construct."""

from __future__ import annotations

import ast

import libcst as cst

from gradfix.edits import Editor, as_receiver, cst_argument
from gradfix.rule import FixAvailability, FixPlan, FixSafety, Invalid, Rule, Valid
from gradfix.semantic.syntax import (
    CallArgument,
    VariableNames,
    argument_node,
    argument_value,
    argument_values,
    call_arguments,
    is_false,
    is_true,
)

#: What may sit between an expression and its parentheses.
_LAYOUT = (b" ", b"\t", b"\r", b"\n", b"\\")


class TensorCopyConstruct(Rule):
    """
    ## What it does
    Finds `torch.tensor(t)` where `t` is already a tensor and rewrites it to
    `t.detach().clone()`.

    ## Why is this bad?
    `torch.tensor()` is meant for Python data (numbers, lists, NumPy arrays). Given a
    tensor, it silently makes a detached copy: gradients stop there, which may or may not be
    what the author meant, and torch warns "To copy construct from a tensor, it is
    recommended to use sourceTensor.detach().clone() or
    sourceTensor.detach().clone().requires_grad_(True), rather than
    torch.tensor(sourceTensor)."

    ## Example
    ```python
    w = torch.randn(3, requires_grad=True)
    w0 = torch.tensor(w)
    start = torch.tensor(w, dtype=torch.float64, requires_grad=True)
    ```

    ## Use instead
    ```python
    w0 = w.detach().clone()
    start = w.detach().clone().to(torch.float64).requires_grad_(True)
    ```
    A `dtype=` or `device=` argument becomes `.to(...)`, `requires_grad=True` becomes
    `.requires_grad_(True)`; `torch.as_tensor(t)` is the choice when no copy is needed.

    ## Fix safety
    Safe: `torch.tensor(t)` keeps `t`'s dtype, device and strides, copies its storage and
    does not require grad, and so does `t.detach().clone()` (checked on torch 2.13);
    `.to(dtype, device)` after the copy converts exactly as the constructor does. With other
    arguments (`pin_memory=`, positional extras) the finding has no fix. Only arguments the
    analysis proves to be one tensor are reported, on every path (a name that is a list on
    one branch and a tensor on another is not): lists and tuples (GF101's business),
    NumPy arrays, Python data and unknown values are not. `torch.Tensor(t)` is not reported:
    it returns an alias of `t` (same storage, same `requires_grad`), not a copy, and does
    not warn. `torch.as_tensor(t)` does not copy and is correct.
    """

    code = "GF104"
    calls = frozenset({"tensor"})
    name = "tensor-copy-construct"
    synopsis = (
        "Finds `torch.tensor(t)` where `t` is already a tensor and rewrites it to "
        "`t.detach().clone()`."
    )
    message = "`torch.tensor()` of a tensor; use `t.detach().clone()`"
    fix_safety = FixSafety.SAFE
    fix_availability = FixAvailability.SOMETIMES

    VALID = [
        Valid(
            """
            import torch
            ratios = torch.ones(3)
            if not isinstance(ratios, torch.Tensor):  # defensive: a list from a config
                ratios = torch.tensor(ratios)
            """
        ),
        Valid(
            """
            import torch

            def interpolate(x):
                return torch.nn.functional.interpolate(x[None, None], size=4)[0, 0]

            class Config:
                ratios = None

                def normalise(self):
                    if not torch.is_tensor(self.ratios):
                        self.ratios = torch.tensor(self.ratios)
                    self.ratios = interpolate(self.ratios)
            """
        ),
        Valid(
            """
            import torch

            def normalize(latents: torch.Tensor, mean: torch.Tensor) -> torch.Tensor:
                # callers pass config lists despite the annotation
                mean = torch.tensor(mean).view(1, -1, 1, 1)
                return latents - mean
            """
        ),
        Valid(
            """
            import torch

            def collate(batch):
                targets = [item[1] for item in batch]
                if isinstance(targets[0], torch.Tensor):
                    targets = torch.stack(targets)
                else:
                    targets = torch.tensor(targets, dtype=torch.int64)  # a list here
                return targets
            """
        ),
        Valid(
            """
            import numpy as np
            import torch
            arr = np.ones(3)
            values = [1.0, 2.0]
            a = torch.tensor(arr)
            b = torch.tensor(values)
            """
        ),
        Valid(
            """
            import torch
            x = torch.rand(3)
            y = torch.as_tensor(x)
            z = x.detach().clone()
            """
        ),
        Valid(
            """
            import torch

            def load(batch):
                return torch.tensor(batch["ids"])  # unknown data
            """
        ),
        Valid(
            """
            import torch

            class Pairs(torch.utils.data.Dataset):
                def __init__(self, rows, weighted):
                    self.rows = rows
                    self.weights = [[1.0] * len(r) for r in rows] if weighted else None

                def __getitem__(self, i):
                    if self.weights is not None:
                        weight = self.weights[i]  # a list of floats
                    else:
                        weight = torch.ones(len(self.rows[i]))
                    return torch.tensor(self.rows[i]), torch.tensor(weight)
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            w = torch.randn(3, requires_grad=True)
            w0 = torch.tensor(w)
            """,
            """
            import torch
            w = torch.randn(3, requires_grad=True)
            w0 = w.detach().clone()
            """,
        ),
        Invalid(
            """
            import torch as th
            x = th.rand(2, 2)
            start = th.tensor(x * 2, dtype=th.float64, requires_grad=True)
            """,
            """
            import torch as th
            x = th.rand(2, 2)
            start = (x * 2).detach().clone().to(th.float64).requires_grad_(True)
            """,
        ),
        Invalid(
            """
            import torch
            w = torch.randn(3, requires_grad=True)
            copy = torch.tensor(w, pin_memory=True)  # no fix: `clone` has no `pin_memory`
            """,
            report_only=True,
        ),
    ]

    def visit_Call(self, node: ast.Call) -> None:
        if self.analysis.call_name(node) != "torch.tensor":
            return
        data = argument_node(node, "data", 0)
        if data is None:
            return
        value = argument_value(data)
        if not self.analysis.is_tensor(value, node) or not self._tensor_on_every_path(value, node):
            return
        if self._rests_on_parameter(value, node):
            return  # `torch.tensor(x)` on an argument is a defensive conversion of lists too
        if self._guarded_by_tensor_test(node, value):
            return  # `if not torch.is_tensor(x): x = torch.tensor(x)`: x is no tensor there
        self.report(node, fix=self._fix(node, data))

    def _tensor_on_every_path(self, expr: ast.expr, at: ast.AST) -> bool:
        """A name holds a tensor whichever of its bindings reached ``at`` (``if use_mask:
        mask = masks[i]`` holds a list, ``else: mask = torch.ones(n)`` a tensor: the fix's
        ``.detach()`` would raise on the list)."""
        if type(expr) is not ast.Name:
            return True
        return all(
            b.kind == "assign" and b.value is not None and self.analysis.is_tensor(b.value, b.node)
            for b in self.analysis.reaching_bindings(expr, at)[1:]
        )

    def _guarded_by_tensor_test(self, at: ast.Call, expr: ast.expr) -> bool:
        """``at`` runs only when its argument ``expr`` is not a tensor (``if not
        torch.is_tensor(expr)``, ``if not isinstance(expr, torch.Tensor)``)."""
        code = self._as_written(at, expr)
        for ancestor in self.analysis.ancestors(at):
            if type(ancestor) is not ast.If or not self.analysis.block_contains(ancestor.body, at):
                continue
            test = ancestor.test
            if type(test) is not ast.UnaryOp or type(test.op) is not ast.Not:
                continue
            call = test.operand
            if type(call) is not ast.Call or not (call.args or call.keywords):
                continue
            checked = self._as_written(call, argument_values(call)[0])
            name = self.analysis.call_name(call)
            is_check = name == "torch.is_tensor" or (
                type(call.func) is ast.Name and call.func.id == "isinstance"
            )
            if is_check and checked == code:
                return True
        return False

    def _as_written(self, call: ast.Call, expr: ast.expr) -> bytes:
        """The text of ``expr``, an argument of ``call``, with its own parentheses (not the
        call's): what LibCST printed for the argument's value."""
        source = self.context.source.encode("utf-8")  # ast columns count bytes
        starts = [0]
        for line in source.splitlines(keepends=True):
            starts.append(starts[-1] + len(line))
        func = call.func
        opening = source.index(
            b"(", starts[(func.end_lineno or 1) - 1] + (func.end_col_offset or 0)
        )
        start = starts[expr.lineno - 1] + expr.col_offset
        end = starts[(expr.end_lineno or 1) - 1] + (expr.end_col_offset or 0)
        while True:
            before, after = start - 1, end
            while before > opening and source[before : before + 1] in _LAYOUT:
                before -= 1
            while after < len(source) and source[after : after + 1] in _LAYOUT:
                after += 1
            if before <= opening or source[before : before + 1] != b"(":
                return source[start:end]
            if source[after : after + 1] != b")":
                return source[start:end]
            start, end = before, after + 1

    def _rests_on_parameter(self, expr: ast.expr, at: ast.AST) -> bool:
        """A bare name in ``expr`` is a function parameter: its annotation is no proof."""
        collector = _BareNames()
        collector.visit(expr)
        return any(
            (binding := self.analysis.reaching_binding(n, at)) is not None
            and binding.kind == "param"
            for n in collector.names
        )

    def _fix(self, node: ast.Call, data: CallArgument) -> FixPlan | None:
        requires_grad = False
        for arg in call_arguments(node):
            keyword = arg.arg if type(arg) is ast.keyword else None
            value = argument_value(arg)
            if arg is data or keyword == "requires_grad" and is_false(value):
                continue
            if keyword == "requires_grad" and is_true(value):
                requires_grad = True
            elif keyword not in ("dtype", "device"):
                return None  # pin_memory=, positional extras, a computed requires_grad

        def copy(editor: Editor, call: cst.CSTNode) -> cst.BaseExpression | None:
            assert isinstance(call, cst.Call)
            return _detached_copy(call, requires_grad)

        return self.plan_replace(node, copy, "Use `.detach().clone()`")


def _detached_copy(node: cst.Call, requires_grad: bool) -> cst.BaseExpression | None:
    """``data.detach().clone()``, then ``.to(...)`` for ``dtype=``/``device=`` and
    ``.requires_grad_(True)``."""
    data = cst_argument(node, "data", 0)
    if data is None:
        return None
    receiver = _receiver_keeping_layout(node, data)
    if receiver is None:  # one line; the engine moves the call's comments to its front
        receiver = as_receiver(data.value)
    new = _method(receiver, "detach")
    new = _method(new, "clone")
    for arg in node.args:
        if arg.keyword is not None and arg.keyword.value in ("dtype", "device"):
            new = _method(new, "to", arg.value)
    if requires_grad:
        new = _method(new, "requires_grad_", cst.Name("True"))
    return new.with_changes(lpar=node.lpar, rpar=node.rpar)


def _receiver_keeping_layout(node: cst.Call, data: cst.Arg) -> cst.BaseExpression | None:
    """The copied tensor, keeping a multi-line call's layout and the comment after it:

        torch.tensor(            (
            x,  # why       ->       x  # why
            dtype=d,             ).detach().clone().to(d)
        )

    ``None`` when comments sit elsewhere in the call.
    """
    placeholder = data.with_changes(value=cst.Name("_"))
    if not _has_comment(
        node.with_changes(args=[placeholder if a is data else a for a in node.args])
    ):
        return as_receiver(data.value)  # nothing to keep but line breaks: one line
    others = [a for a in node.args if a is not data]
    if others and any(_has_comment(a.with_changes(value=cst.Name("_"))) for a in others[:-1]):
        return None
    if others and _has_comment(others[-1].with_changes(value=cst.Name("_"), comma=None)):
        return None
    after_data = _whitespace_after(data)
    closing = _whitespace_after(node.args[-1])
    if not isinstance(after_data, cst.ParenthesizedWhitespace) or not isinstance(
        closing, cst.ParenthesizedWhitespace
    ):
        return None
    if closing is not after_data and closing.first_line.comment is not None:
        return None
    before = after_data.with_changes(indent=closing.indent, last_line=closing.last_line)
    return data.value.with_changes(
        lpar=[cst.LeftParen(whitespace_after=node.whitespace_before_args), *data.value.lpar],
        rpar=[*data.value.rpar, cst.RightParen(whitespace_before=before)],
    )


def _whitespace_after(arg: cst.Arg) -> cst.BaseParenthesizableWhitespace:
    """The whitespace after ``arg`` and its comma, if any."""
    if isinstance(arg.comma, cst.Comma):
        return arg.comma.whitespace_after
    return arg.whitespace_after_arg


def _has_comment(node: cst.CSTNode) -> bool:
    return "#" in cst.Module([]).code_for_node(node)


def _method(receiver: cst.BaseExpression, name: str, *args: cst.BaseExpression) -> cst.Call:
    return cst.Call(cst.Attribute(receiver, cst.Name(name)), [cst.Arg(a) for a in args])


class _BareNames(VariableNames):
    """The names of an expression outside attributes and calls: ``self.w`` is evidence from
    the class, a call's result is a tensor because of the callee."""

    def visit_Attribute(self, node: ast.Attribute) -> None:
        pass

    def visit_Call(self, node: ast.Call) -> None:
        pass
