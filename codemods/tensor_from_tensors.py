"""GF101 tensor-from-tensors."""

from __future__ import annotations

import ast

import libcst as cst

from gradfix.edits import Editor
from gradfix.rule import Edit, FixAvailability, FixPlan, FixSafety, Invalid, Rule, Valid
from gradfix.semantic.syntax import (
    CallArgument,
    argument,
    argument_value,
    argument_values,
    arguments_in_source_order,
    is_false,
    is_number_literal,
    is_true,
    literal_items,
)
from gradfix.torch_facts import INTEGER_DTYPES, NO_GRAD_CONTEXTS

CONSTRUCTORS = frozenset(
    {"torch.tensor", "torch.Tensor", "torch.FloatTensor", "torch.DoubleTensor", "torch.as_tensor"}
)

#: methods that turn a tensor into Python or NumPy values
VALUE_METHODS = frozenset({"numpy", "tolist", "item"})
#: methods that keep a tensor's values on the way to such a read
VALUE_KEEPING_METHODS = frozenset(
    "cpu detach float double half to mean sum std min max median squeeze flatten view".split()
)
#: builtins that print or convert values
VALUE_BUILTINS = frozenset({"print", "float", "str", "repr", "round", "list"})
#: libraries that consume values: arrays, plots, logs
VALUE_LIBRARIES = frozenset({"numpy", "matplotlib", "seaborn", "pandas", "logging", "wandb"})


class TensorFromTensors(Rule):
    """
    ## What it does
    Finds `torch.tensor([...])` (also `torch.Tensor`, `torch.FloatTensor`,
    `torch.DoubleTensor`, `torch.as_tensor`) built from tensors that require grad, and
    rewrites it to `torch.stack([...])` (`torch.cat` for 1-element slices). The list may be
    a literal, a comprehension, or a list name filled before the call
    (`xs = []; for ...: xs.append(t)`; `torch.tensor(xs)` -> `torch.stack(xs)`).

    ## Why is this bad?
    `torch.tensor` copies the *values* of its elements into a new constant tensor: the
    autograd graph is cut there. `backward()` then raises "element 0 of tensors does not
    require grad and does not have a grad_fn", or the gradients silently stop at the copy
    and the parameters before it are never trained. torch also warns "Converting a tensor
    with requires_grad=True to a scalar may lead to unexpected behavior".

    ## Example
    ```python
    a = torch.nn.Parameter(torch.rand(5))
    a0 = a[0] * 2
    a1 = torch.log(a[1] + 1)
    A = torch.tensor([a0, a1])
    A.sum().backward()  # RuntimeError: element 0 of tensors does not require grad
    ```

    ## Use instead
    ```python
    A = torch.stack([a0, a1])
    ```
    A `dtype=` argument becomes `.to(dtype)` and a `device=` argument `.to(device)`.

    ## Fix safety
    Safe when every element is a tensor in the graph: `stack` gives the same values and
    shape for 0-d elements. Unsafe when the list mixes tensors and Python numbers (each
    number is wrapped in `torch.as_tensor`, and the result dtype follows type promotion
    instead of the default dtype). No fix when some element cannot be shown to be a tensor,
    or with `requires_grad=True` (a deliberate new leaf). Unsafe for a list filled by
    `append` in a loop or branch that may not run: `torch.stack([])` raises where
    `torch.tensor([])` gave an empty tensor. Python numbers, NumPy arrays,
    `x.item()` values and index lists are correct uses of `torch.tensor` and are not
    reported, nor is a tensor built only to be read as values (`.numpy()`, `.tolist()`,
    `.item()`, printed, logged or plotted: a history of losses), where the copy is meant.
    """

    code = "GF101"
    assign_targets = frozenset({ast.Attribute})  # visit_Assign: ``p.requires_grad = False``
    calls = frozenset({name.rpartition(".")[2] for name in CONSTRUCTORS} | {"requires_grad_"})
    fix_restores_gradient = True
    name = "tensor-from-tensors"
    synopsis = (
        "Finds `torch.tensor([...])` built from tensors in the graph, a constant copy "
        "that cuts backward, and rewrites it to `torch.stack` / `torch.cat`."
    )
    message = "`torch.tensor()` of tensors cuts the autograd graph; use `torch.stack()`"
    fix_safety = FixSafety.SAFE
    fix_availability = FixAvailability.SOMETIMES
    fix_safeties = (FixSafety.SAFE, FixSafety.UNSAFE)

    VALID = [
        Valid(
            """
            import torch
            lr = 0.1
            t = torch.tensor([1.0, 2.0, lr])
            """
        ),
        Valid(
            """
            import numpy as np
            import torch
            arr = np.zeros(3)
            labels = torch.tensor([0, 2, 1])
            t = torch.tensor(arr)
            """
        ),
        Valid(
            """
            import torch
            w = torch.nn.Parameter(torch.rand(3))
            t = torch.tensor([w[0].item(), w[1].item()])
            """
        ),
        Valid(
            """
            import torch
            x = torch.rand(3)
            stats = torch.tensor([x.min(), x.max()])  # data, no graph to cut
            """
        ),
        Valid(
            """
            import torch
            from torch import nn

            class Attention(nn.Module):
                def forward(self, hidden, shapes):
                    h = hidden * 2
                    sizes = torch.tensor([[h.shape[1], h.shape[0]]], dtype=torch.long)
                    offsets = torch.tensor([[s[1], s[0]] for s in shapes], dtype=torch.long)
                    return h, sizes, offsets
            """
        ),
        Valid(
            """
            def f(torch, a):
                return torch.tensor([a[0], a[1]])  # a local named torch
            """
        ),
        Valid(
            """
            import matplotlib.pyplot as plt
            import torch
            w = torch.nn.Parameter(torch.rand(3))
            history = []
            for step in range(5):
                loss = (w**2).sum()
                loss.backward()
                history.append(loss)  # plotted below: values wanted, not a graph
            curve = torch.tensor(history)
            plt.plot(curve.numpy())
            print(f"final {curve[-1]}")
            print(torch.tensor(history).mean().item())
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            a = torch.nn.Parameter(torch.rand(5))
            a0 = a[0] * 2
            a1 = torch.log(a[1] + 1)
            A1 = torch.tensor([a0, a1])
            """,
            """
            import torch
            a = torch.nn.Parameter(torch.rand(5))
            a0 = a[0] * 2
            a1 = torch.log(a[1] + 1)
            A1 = torch.stack([a0, a1])
            """,
        ),
        Invalid(
            """
            import torch as th
            from torch import nn

            class Net(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.p = nn.Parameter(th.rand(2))

                def forward(self, x):
                    scale = th.FloatTensor([self.p[0], self.p[1] * 2])
                    return x * scale
            """,
            """
            import torch as th
            from torch import nn

            class Net(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.p = nn.Parameter(th.rand(2))

                def forward(self, x):
                    scale = th.stack([self.p[0], self.p[1] * 2])
                    return x * scale
            """,
        ),
        Invalid(
            """
            import torch
            w = torch.randn(4, requires_grad=True)
            v = torch.tensor([w[0], w[1] ** 2], dtype=torch.float64)
            """,
            """
            import torch
            w = torch.randn(4, requires_grad=True)
            v = torch.stack([w[0], w[1] ** 2]).to(torch.float64)
            """,
        ),
        Invalid(
            """
            import torch
            w = torch.randn(3, requires_grad=True)
            parts = []
            for i in range(3):
                parts.append(w[i] ** 2)
            total = torch.tensor(parts).sum()
            """,
            """
            import torch
            w = torch.randn(3, requires_grad=True)
            parts = []
            for i in range(3):
                parts.append(w[i] ** 2)
            total = torch.stack(parts).sum()
            """,
        ),
        Invalid(
            """
            import torch


            def path_lengths(points):
                lengths = []
                for a, b in zip(points[:-1], points[1:]):
                    lengths.append(torch.linalg.vector_norm(b - a))
                return torch.tensor(lengths)  # unsafe: `torch.stack([])` raises on an empty list


            path_lengths(torch.randn(5, 2, requires_grad=True))
            """,
            """
            import torch


            def path_lengths(points):
                lengths = []
                for a, b in zip(points[:-1], points[1:]):
                    lengths.append(torch.linalg.vector_norm(b - a))
                return torch.stack(lengths)  # unsafe: `torch.stack([])` raises on an empty list


            path_lengths(torch.randn(5, 2, requires_grad=True))
            """,
        ),
        Invalid(
            """
            import torch
            w = torch.randn(2, requires_grad=True)
            pair = torch.tensor([w[0], w[1]], pin_memory=True)  # no fix: `stack` lacks `pin_memory`
            """,
            report_only=True,
        ),
    ]

    def visit_Call(self, node: ast.Call) -> None:
        name = self.analysis.call_name(node)
        if name not in CONSTRUCTORS:
            self._frozen_by_method_at_run(node)
            return
        arguments = arguments_in_source_order(node)
        if not arguments or (type(arguments[0]) is ast.keyword and arguments[0].arg is not None):
            return
        dtype = argument(node, "dtype", None)
        if dtype is not None and self.analysis.qualified_name(dtype) in INTEGER_DTYPES:
            return  # integer data (shapes, indices): the values are wanted, not a graph
        data = argument_value(arguments[0])
        located = self._elements(node, data)
        if located is None or self.analysis.in_no_grad(node):
            return
        elements, certain = located
        in_graph = [self.analysis.requires_grad(e, at) for e, at in elements]
        if not any(in_graph) or self._read_as_values(node):
            return
        self.report(node, fix=self._fix(node, arguments, data, elements, in_graph, certain))

    # -- on a run's evidence: where a loss without graph lost it -------------------------
    # (``gradfix trace`` saw a backward find no grad_fn in a value computed there; offered
    # only then, and written only once a rerun of the program proves the fix)
    def visit_With(self, node: ast.With) -> None:
        """``with torch.no_grad():`` computed the value a backward found without graph:
        its statements run with grad (the block is unwrapped)."""
        if not self.proven_at_run(node.lineno, "no-grad-cut") or len(node.items) != 1:
            return
        item = node.items[0]
        call = item.context_expr
        if item.optional_vars is not None or type(call) is not ast.Call:
            return
        if self.analysis.call_name(call) not in NO_GRAD_CONTEXTS or argument_values(call):
            return

        def build(editor: Editor) -> list[Edit] | None:
            block = editor.node(node)
            if not isinstance(block, cst.With) or not isinstance(block.body, cst.IndentedBlock):
                return None
            first, *rest = block.body.body
            if not isinstance(first, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
                return None
            leading = [*block.leading_lines, *first.leading_lines]
            unwrapped = [first.with_changes(leading_lines=leading), *rest]
            return [Edit(block, cst.FlattenSentinel(unwrapped))]

        description = "Compute it with grad (unwrap the `no_grad` block)"
        fix = self.plan(build, description)
        self.report(node, "the value computed in this `no_grad` block is backpropagated", fix=fix)

    def visit_Assign(self, node: ast.Assign) -> None:
        """``p.requires_grad = False`` froze every tensor the value a backward found
        without graph was computed from: the tensor stays trainable."""
        target = node.targets[0]
        if len(node.targets) != 1 or type(target) is not ast.Attribute:
            return
        if target.attr != "requires_grad" or not is_false(node.value):
            return
        if self.proven_at_run(node.lineno, "frozen-cut"):
            fix = self.plan_replace(
                node.value,
                lambda editor, value: value.with_changes(value="True"),
                "Keep it trainable (`requires_grad = True`)",
            )
            self.report(node, _FROZEN, fix=fix)

    def _frozen_by_method_at_run(self, node: ast.Call) -> None:
        """``p.requires_grad_(False)`` / ``model.requires_grad_(False)``: the same."""
        func = node.func
        if type(func) is not ast.Attribute or func.attr != "requires_grad_":
            return
        values = argument_values(node)
        if len(values) != 1 or not is_false(argument(node, "requires_grad", 0)):
            return
        if self.proven_at_run(node.lineno, "frozen-cut"):
            fix = self.plan_replace(
                node,
                lambda editor, call: call.with_changes(args=[]),
                "Keep it trainable (`requires_grad_()`)",
            )
            self.report(node, _FROZEN, fix=fix)

    def _read_as_values(self, node: ast.Call) -> bool:
        """The new tensor is only read for its values, to print, log or plot:
        ``torch.tensor(losses).numpy()``, ``plt.plot(torch.tensor(losses))``, or a name
        bound to it whose every use is such a read. No graph is wanted there, and
        ``torch.stack`` would make ``.numpy()`` raise on elements that require grad."""
        parent = self.analysis.parent(node)
        if type(parent) is ast.Assign and len(parent.targets) == 1 and parent.value is node:
            target = parent.targets[0]
            if type(target) is not ast.Name:
                return False
            uses = [
                n
                for n in self.analysis.name_nodes_in(self.analysis.scope_of(node).node, target.id)
                if n is not target
                and self.analysis.reaching_binding(n) is not None
                and self.analysis.reaching_binding(n).node is parent  # type: ignore[union-attr]
            ]
            return bool(uses) and all(self._value_read(use) for use in uses)
        return self._value_read(node)

    def _value_read(self, expr: ast.expr) -> bool:
        """``expr`` (through value-keeping methods) becomes Python values or goes to a
        printing, logging or plotting call."""
        node: ast.AST = expr
        parent = self.analysis.parent(node)
        while getattr(parent, "value", None) is node and type(parent) in (
            ast.Attribute,
            ast.Subscript,
        ):
            if type(parent) is ast.Subscript:  # ``losses[-1]``: still values
                node, parent = parent, self.analysis.parent(parent)
                continue
            assert type(parent) is ast.Attribute
            call = self.analysis.parent(parent)
            if type(call) is not ast.Call or call.func is not parent:
                return False
            if parent.attr in VALUE_METHODS:
                return True
            if parent.attr not in VALUE_KEEPING_METHODS:
                return False
            node, parent = call, self.analysis.parent(call)
        if type(parent) is ast.FormattedValue:
            return True
        if type(parent) is not ast.Call or node not in parent.args:
            return False
        name = self.analysis.call_name(parent)
        if type(parent.func) is ast.Name and parent.func.id in VALUE_BUILTINS and name is None:
            return True
        return name is not None and name.split(".")[0] in VALUE_LIBRARIES

    def _elements(
        self, node: ast.Call, data: ast.expr
    ) -> tuple[list[tuple[ast.expr, ast.AST]], bool] | None:
        """The elements with where they are evaluated, and whether the list is certainly
        non-empty: a list/tuple literal, a list comprehension, or a list name built by
        ``append`` / ``extend`` / ``+=`` before the call (``xs.append(t)``)."""
        if type(data) is ast.Name:
            return self.analysis.list_elements(data, node)
        literal = _elements(data)
        return None if literal is None else ([(e, node) for e in literal], True)

    def _fix(
        self,
        node: ast.Call,
        arguments: list[CallArgument],
        data: ast.expr,
        located: list[tuple[ast.expr, ast.AST]],
        in_graph: list[bool],
        certain: bool,
    ) -> FixPlan | None:
        elements = [element for element, _ in located]
        for arg in arguments[1:]:
            keyword = arg.arg if type(arg) is ast.keyword else None
            if keyword in ("dtype", "device"):
                continue  # becomes ``.to(...)``
            if keyword != "requires_grad" or is_true(argument_value(arg)):
                return None  # positional extras, or a deliberate new leaf
        numbers = [not g and is_number_literal(e) for e, g in zip(elements, in_graph)]
        if not all(g or n for g, n in zip(in_graph, numbers)):
            return None  # an element we cannot show to be a tensor
        if any(numbers) and type(data) is ast.Name:
            return None  # numbers appended to a list cannot be wrapped where they are added
        shapes = {self.analysis.element_shape(e, at) for (e, at), g in zip(located, in_graph) if g}
        if "piece" in shapes and shapes != {"piece"} or (any(numbers) and "piece" in shapes):
            return None
        combine = "cat" if shapes == {"piece"} else "stack"
        # ``torch.stack([])`` raises where ``torch.tensor([])`` gave an empty tensor.
        exact = shapes <= {"scalar", "piece"} and not any(numbers) and certain
        safety = None if exact else FixSafety.UNSAFE

        def combined(editor: Editor, call: cst.CSTNode) -> cst.BaseExpression:
            assert isinstance(call, cst.Call)
            return _combined(editor, call, combine, numbers)

        return self.plan_replace(node, combined, f"Use `torch.{combine}`", safety=safety)


_FROZEN = "`requires_grad` turned off for every tensor a backpropagated value is computed from"


def _combined(
    editor: Editor, node: cst.Call, combine: str, numbers: list[bool]
) -> cst.BaseExpression:
    """``torch.<combine>(data)`` with the numbers of ``data`` wrapped in ``as_tensor``, then
    ``.to(dtype)`` / ``.to(device)`` for those arguments."""
    data = node.args[0].value
    new_data = _wrap_numbers(editor, data, numbers) if any(numbers) else data
    conversions = [
        a.value
        for a in node.args[1:]
        if a.keyword is not None and a.keyword.value in ("dtype", "device")
    ]
    # Keep the call's own layout: its parentheses, and the last argument's trailing comma.
    first = node.args[0].with_changes(value=new_data, comma=node.args[-1].comma)
    new: cst.BaseExpression = node.with_changes(func=editor.torch_attr(combine), args=[first])
    for value in conversions:
        new = cst.Call(cst.Attribute(new, cst.Name("to")), [cst.Arg(value)])
    return new


def _wrap_numbers(
    editor: Editor, data: cst.BaseExpression, numbers: list[bool]
) -> cst.BaseExpression:
    assert isinstance(data, (cst.List, cst.Tuple))
    as_tensor = editor.torch_attr("as_tensor")
    elements = [
        e.with_changes(value=cst.Call(as_tensor, [cst.Arg(e.value)])) if is_number else e
        for e, is_number in zip(data.elements, numbers)
    ]
    return data.with_changes(elements=elements)


def _elements(data: ast.expr) -> list[ast.expr] | None:
    """The elements of a list/tuple literal or the element of a list comprehension."""
    if type(data) is ast.ListComp:
        return [data.elt]
    items = literal_items(data)
    return items or None
