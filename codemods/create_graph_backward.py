"""GF402 create-graph-backward."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import libcst as cst

from gradfix.analysis import VIEW_ATTRIBUTES, argument, is_true
from gradfix.rule import Edit, Fix, FixAvailability, FixSafety, Invalid, Rule, Valid
from gradfix.torch_facts import FACTORIES
from gradfix.walk import walk

#: ``backward`` entry points -> position of ``create_graph`` (and of ``gradient``).
TENSOR_BACKWARD = {"create_graph": 2, "gradient": 0}
AUTOGRAD_BACKWARD = {"create_graph": 3, "gradient": 1}
#: Attributes and methods whose result carries no gradient back to the tensor.
DETACHING = frozenset("data shape dtype device ndim detach item tolist numpy size dim".split())
#: Methods combining the receiver with tensor arguments: an argument leaf stays in the graph.
TENSOR_METHODS = frozenset(
    "add sub mul div matmul mm bmm pow where masked_fill expand_as view_as type_as dot "
    "maximum minimum atan2 hypot".split()
)
#: Calls after which ``.grad`` holds more than the create_graph pass put there.
GRAD_WRITERS = frozenset({"backward", "step"})
_MAX_DEPTH = 12


@dataclass
class GradRead:
    """``x.grad`` read after the backward call: replaced by the returned gradient."""

    node: cst.Attribute
    leaf: str


class CreateGraphBackward(Rule):
    """
    ## What it does
    Finds `loss.backward(create_graph=True)` and
    `torch.autograd.backward(loss, create_graph=True)`, and rewrites them to
    `torch.autograd.grad(loss, inputs, create_graph=True)` when the gradients are only
    read through the `.grad` of known leaves.

    ## Why is this bad?
    With `create_graph=True`, `backward()` stores in each leaf's `.grad` a tensor whose
    graph refers back to the leaf: a reference cycle between the parameter and its
    gradient that the garbage collector cannot free while `.grad` is set, so memory leaks
    (PyTorch warns: "Using backward() with create_graph=True will create a reference cycle
    between the parameter and its gradient which can cause a memory leak. We recommend
    using autograd.grad when creating the graph to avoid this."). It also adds the
    first-order gradient into the `.grad` of *every* leaf the loss depends on, network
    parameters included, so a later `optimizer.step()` sees gradients it never asked for.

    ## Example
    ```python
    x = torch.linspace(0.0, 1.0, 50, requires_grad=True)
    u = torch.sin(3 * x)
    u.sum().backward(create_graph=True)
    u_x = x.grad
    u_x.sum().backward()
    ```

    ## Use instead
    ```python
    (x_grad,) = torch.autograd.grad(u.sum(), x, create_graph=True)
    u_x = x_grad
    u_x.sum().backward()
    ```
    `torch.autograd.grad` returns the gradients instead of storing them: nothing is left in
    `.grad`, so there is no cycle and no stray gradient.

    ## Fix safety
    The fix is safe and applied only when every fact it relies on is in the code: the loss
    depends on no leaf but the local tensors whose `.grad` is read afterwards (no `nn`
    layer, `self.` attribute or function argument in its graph), those leaves do not escape
    (no optimizer, list or function call gets them), their `.grad` was empty before the call
    (no earlier `backward()`, not accumulated across loop iterations), and every read of
    their `.grad` comes before the next `backward()` / `step()` in the same block. Then the
    returned gradients are exactly what `.grad` held. Otherwise (a PINN or gradient penalty
    through a network, Hessian-vector products over `model.parameters()`, MAML inner
    loops) the call is reported without a fix: compute the derivatives you need with
    `torch.autograd.grad(loss, inputs, create_graph=True)`, or, if an optimizer must see
    `.grad`, set every `p.grad = None` once it is used to break the cycle.
    """

    code = "GF402"
    name = "create-graph-backward"
    message = (
        "`backward(create_graph=True)` makes a reference cycle between each leaf and its "
        "`.grad` (memory leak); use `torch.autograd.grad(loss, inputs, create_graph=True)` "
        "or reset `.grad = None` after use"
    )
    fix_safety = FixSafety.SAFE
    fix_availability = FixAvailability.SOMETIMES
    prefilter = ("create_graph",)

    VALID = [
        Valid(
            """
            import torch
            x = torch.linspace(0.0, 1.0, 5, requires_grad=True)
            y = torch.sin(x)
            (dy,) = torch.autograd.grad(y.sum(), x, create_graph=True)
            dy.sum().backward()
            """
        ),
        Valid(
            """
            import torch
            w = torch.randn(3, requires_grad=True)
            loss = (w * w).sum()
            loss.backward(create_graph=False)
            """
        ),
        Valid(
            """
            def backward(loss, scaler, create_graph=False):
                scaler.scale(loss).backward(create_graph=create_graph)
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            a = torch.tensor([3.0], requires_grad=True)
            b = a * a * a
            b.backward(create_graph=True)
            db_da = a.grad
            db_da.backward()
            """,
            """
            import torch
            a = torch.tensor([3.0], requires_grad=True)
            b = a * a * a
            (a_grad,) = torch.autograd.grad(b, a, create_graph=True)
            db_da = a_grad
            db_da.backward()
            """,
        ),
        Invalid(
            """
            import torch
            from torch import nn
            net = nn.Sequential(nn.Linear(1, 8), nn.Tanh(), nn.Linear(8, 1))
            opt = torch.optim.Adam(net.parameters())
            x = torch.rand(16, 1, requires_grad=True)
            u = net(x)
            u.sum().backward(create_graph=True)
            residual = (x.grad - 1.0).pow(2).mean()
            opt.zero_grad()
            residual.backward()
            opt.step()
            """,
            report_only=True,
        ),
        Invalid(
            """
            import torch
            a = torch.tensor([2.0], requires_grad=True)
            b = a ** 3
            b.retain_grad()
            b.backward(create_graph=True)
            print(a.grad, b.grad)
            """,
            report_only=True,
        ),
        Invalid(
            """
            import torch
            x = torch.ones(3, requires_grad=True)
            for step in range(3):
                y = (x ** 2).sum()
                torch.autograd.backward(y, create_graph=True)
                print(x.grad)
            """,
            report_only=True,
        ),
        Invalid(
            """
            import torch
            from torch import nn
            critic = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1))
            real, fake = torch.randn(8, 4), torch.randn(8, 4)
            alpha = torch.rand(8, 1)
            mixed = (alpha * real + (1 - alpha) * fake).requires_grad_(True)
            score = critic(mixed)
            score.backward(torch.ones_like(score), create_graph=True)
            penalty = ((mixed.grad.norm(2, dim=1) - 1) ** 2).mean()
            """,
            report_only=True,
        ),
        Invalid(
            """
            import torch

            def hessian_vector_product(model, loss, vector):
                loss.backward(create_graph=True)
                grads = [p.grad for p in model.parameters()]
                dot = sum((g * v).sum() for g, v in zip(grads, vector))
                return torch.autograd.grad(dot, list(model.parameters()))
            """,
            report_only=True,
        ),
        Invalid(
            """
            import torch

            def inner_step(fast_weights, x, y, lr):
                loss = ((x @ fast_weights - y) ** 2).mean()
                loss.backward(create_graph=True)
                return fast_weights - lr * fast_weights.grad
            """,
            report_only=True,
        ),
    ]

    def visit_Call(self, node: cst.Call) -> None:
        root = self._create_graph_root(node)
        if root is None or not self.analysis.imports_torch():
            return
        self.report(node, fix=self._fix(node, root))

    # -- the call ------------------------------------------------------------------------
    def _positions(self, call: cst.Call) -> dict[str, int] | None:
        func = call.func
        name = self.analysis.call_name(call)
        if name == "torch.autograd.backward":
            return AUTOGRAD_BACKWARD
        if name is None and isinstance(func, cst.Attribute) and func.attr.value == "backward":
            return TENSOR_BACKWARD
        return None

    def _create_graph_root(self, call: cst.Call) -> cst.BaseExpression | None:
        """The tensor ``call`` differentiates when it passes ``create_graph=True``."""
        positions = self._positions(call)
        if positions is None or any(arg.star for arg in call.args):
            return None
        create = argument(call, "create_graph", positions["create_graph"])
        if create is None or not is_true(create.value):
            return None  # a flag variable: timm's scalers pass False unless asked
        if positions is TENSOR_BACKWARD:
            assert isinstance(call.func, cst.Attribute)
            return call.func.value
        first = argument(call, "tensors", 0)
        return first.value if first is not None else None

    # -- the fix -------------------------------------------------------------------------
    def _fix(self, call: cst.Call, root: cst.BaseExpression) -> Fix | None:
        statement = self.analysis.parent(call)
        if not isinstance(statement, cst.Expr) or self.analysis.in_no_grad(call):
            return None
        leaves = self._graph_leaves(root, call, 0)
        if not leaves or argument(call, "inputs", None) is not None:
            return None
        scope = self.analysis.scope_of(call)
        if any(not self._leaf_is_private(leaf, call, scope.node) for leaf in leaves):
            return None
        if not self._grad_empty_before(call, leaves):
            return None
        reads = self._grad_reads_after(call, statement, set(leaves), scope.node)
        if reads is None or {read.leaf for read in reads} != set(leaves):
            return None
        return self._rewrite(call, statement, root, reads)

    def _rewrite(
        self, call: cst.Call, statement: cst.Expr, root: cst.BaseExpression, reads: list[GradRead]
    ) -> Fix | None:
        order = list(dict.fromkeys(read.leaf for read in reads))
        names = {leaf: self._fresh_name(f"{leaf}_grad") for leaf in order}
        inputs: cst.BaseExpression = cst.Name(order[0])
        if len(order) > 1:
            inputs = cst.Tuple([cst.Element(cst.Name(leaf)) for leaf in order])
        arguments = self._grad_arguments(call, root, inputs)
        if arguments is None:
            return None
        grad_call = cst.Call(
            func=self.analysis.torch_attr("autograd.grad"),
            args=arguments,
            whitespace_before_args=call.whitespace_before_args,
        )
        targets = [cst.Element(cst.Name(names[leaf])) for leaf in order]
        # ``(x_grad,) = ...`` for one input, ``x_grad, w_grad = ...`` for several
        target = cst.Tuple(targets) if len(targets) == 1 else cst.Tuple(targets, lpar=[], rpar=[])
        assign = cst.Assign([cst.AssignTarget(target)], grad_call, statement.semicolon)
        edits = [Edit(statement, assign)]
        edits += [Edit(read.node, cst.Name(names[read.leaf])) for read in reads]
        imports = () if self.analysis.torch_alias() else ("torch",)
        return self.fix(edits, "Use `torch.autograd.grad`", imports=imports)

    def _grad_arguments(
        self, call: cst.Call, root: cst.BaseExpression, inputs: cst.BaseExpression
    ) -> list[cst.Arg] | None:
        """``root, inputs`` then the call's options (``gradient`` as ``grad_outputs``);
        None for positional options other than the gradient."""
        positions = self._positions(call) or {}
        space = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        kept: list[cst.Arg] = []
        for index, arg in enumerate(call.args):
            keyword = arg.keyword.value if arg.keyword else None
            if arg.value is root:
                continue
            if keyword in ("gradient", "grad_tensors") or (
                keyword is None and index == positions["gradient"]
            ):
                arg = arg.with_changes(
                    keyword=cst.Name("grad_outputs"),
                    equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")),
                )
            elif keyword is None:
                return None
            kept.append(arg)
        last_comma = space if kept else cst.MaybeSentinel.DEFAULT
        return [cst.Arg(root, comma=space), cst.Arg(inputs, comma=last_comma), *kept]

    def _fresh_name(self, wanted: str) -> str:
        used = {n.value for n in _names(self.analysis.module)}
        name, counter = wanted, 2
        while name in used:
            name, counter = f"{wanted}{counter}", counter + 1
        return name

    # -- which leaves the loss depends on -------------------------------------------------
    def _graph_leaves(
        self, expr: cst.BaseExpression, at: cst.CSTNode, depth: int
    ) -> dict[str, cst.CSTNode] | None:
        """The local leaf names ``expr`` depends on (name -> its binding statement), or None
        when some part of its graph is unknown (a layer, a function, an argument)."""
        if depth > _MAX_DEPTH:
            return None
        if isinstance(expr, (cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString)):
            return {}
        if isinstance(expr, cst.Name):
            return self._name_leaves(expr, at, depth)
        if isinstance(expr, cst.Attribute):
            if expr.attr.value in DETACHING or self.analysis.qualified_name(expr):
                return {}
            if expr.attr.value in VIEW_ATTRIBUTES:
                return self._graph_leaves(expr.value, at, depth + 1)
            return None
        if isinstance(expr, cst.Subscript):
            return self._graph_leaves(expr.value, at, depth + 1)
        if isinstance(expr, cst.BinaryOperation):
            return self._union([expr.left, expr.right], at, depth)
        if isinstance(expr, cst.UnaryOperation):
            return self._graph_leaves(expr.expression, at, depth + 1)
        if isinstance(expr, (cst.Tuple, cst.List)):
            return self._union([e.value for e in expr.elements], at, depth)
        if isinstance(expr, cst.Call):
            return self._call_leaves(expr, at, depth)
        return None

    def _name_leaves(
        self, name: cst.Name, at: cst.CSTNode, depth: int
    ) -> dict[str, cst.CSTNode] | None:
        if name.value in ("True", "False", "None"):
            return {}
        reason = self.analysis.leaf_reason(name, at)
        binding = self.analysis.reaching_binding(name, at)
        if reason is not None:
            if binding is None or binding.kind != "assign":
                return None  # a parameter of the function or a loop variable
            return {name.value: binding.node}
        if binding is None:
            return {} if self.analysis.qualified_name(name) else None
        if binding.kind != "assign" or binding.value is None or binding.unpack_index is not None:
            return None
        return self._graph_leaves(binding.value, binding.node, depth + 1)

    def _call_leaves(
        self, call: cst.Call, at: cst.CSTNode, depth: int
    ) -> dict[str, cst.CSTNode] | None:
        func = call.func
        name = self.analysis.call_name(call)
        arguments = [arg.value for arg in call.args]
        if name is not None:
            if not name.startswith("torch.") or name.startswith(("torch.nn.", "torch.optim")):
                if not name.startswith("torch.nn.functional."):
                    return None
            if name in FACTORIES:
                flag = argument(call, "requires_grad", None)
                return {} if flag is None or not is_true(flag.value) else None
            return self._union(arguments, at, depth)
        if not isinstance(func, cst.Attribute):
            return None
        if func.attr.value in DETACHING:
            return {}
        receiver = self._graph_leaves(func.value, at, depth + 1)
        if receiver is None or (arguments and func.attr.value not in TENSOR_METHODS):
            # ``x.sum(dim=0)``-like options are fine; tensor arguments of unknown methods not
            if any(self._graph_leaves(a, at, depth + 1) != {} for a in arguments):
                return None
        if receiver is None:
            return None
        others = self._union(arguments, at, depth)
        return None if others is None else {**receiver, **others}

    def _union(
        self, exprs: list[cst.BaseExpression], at: cst.CSTNode, depth: int
    ) -> dict[str, cst.CSTNode] | None:
        found: dict[str, cst.CSTNode] = {}
        for expr in exprs:
            leaves = self._graph_leaves(expr, at, depth + 1)
            if leaves is None:
                return None
            found.update(leaves)
        return found

    # -- where the leaves and their gradients go ----------------------------------------------
    def _leaf_is_private(self, leaf: str, call: cst.Call, scope: cst.CSTNode) -> bool:
        """Every use of ``leaf`` in its scope is a tensor op, an attribute or a binding:
        no optimizer, container, function or closure can read its ``.grad``."""
        for use in _names(scope):
            if use.value != leaf:
                continue
            if any(
                isinstance(a, (cst.FunctionDef, cst.Lambda, cst.ClassDef))
                and self.analysis.contains(scope, a)
                and a is not scope
                for a in self.analysis.ancestors(use)
            ):
                return False
            if not self._is_private_use(use):
                return False
        return True

    def _is_private_use(self, use: cst.Name) -> bool:
        parent = self.analysis.parent(use)
        if isinstance(parent, cst.Attribute) and parent.value is use:
            return True
        if isinstance(parent, (cst.AssignTarget, cst.Param)):
            return True
        child: cst.CSTNode = use
        for ancestor in self.analysis.ancestors(use):
            if isinstance(ancestor, cst.Call) and child is not ancestor.func:
                return self._is_tensor_call(ancestor)
            if isinstance(
                ancestor, (cst.BinaryOperation, cst.UnaryOperation, cst.Subscript, cst.Comparison)
            ):
                return True
            if isinstance(
                ancestor,
                (
                    cst.BaseSmallStatement,
                    cst.BaseCompoundStatement,
                    cst.List,
                    cst.Tuple,
                    cst.Set,
                    cst.Dict,
                ),
            ):
                return isinstance(ancestor, cst.Expr)
            child = ancestor
        return False

    def _is_tensor_call(self, call: cst.Call) -> bool:
        name = self.analysis.call_name(call)
        if name is not None:
            return name.startswith("torch.") and not name.startswith(
                ("torch.optim", "torch.nn.Parameter", "torch.nn.utils")
            )
        func = call.func
        if isinstance(func, cst.Name):
            return func.value == "print"
        return isinstance(func, cst.Attribute) and func.attr.value in TENSOR_METHODS

    def _grad_empty_before(self, call: cst.Call, leaves: dict[str, cst.CSTNode]) -> bool:
        """No backward pass could have filled the leaves' ``.grad`` before ``call``."""
        scope = self.analysis.scope_of(call).node
        start = min(self.analysis.end_index(node) for node in leaves.values())
        for loop in self.analysis.ancestors(call):
            if loop is scope:
                break
            if isinstance(loop, (cst.For, cst.While)) and start < self.analysis.index(loop):
                return False  # the leaf lives across iterations: ``.grad`` accumulates
        end = self.analysis.index(call)
        return not any(start < self.analysis.index(other) < end for other in _grad_writers(scope))

    def _grad_reads_after(
        self, call: cst.Call, statement: cst.Expr, leaves: set[str], scope: cst.CSTNode
    ) -> list[GradRead] | None:
        """The ``.grad`` reads after ``call``, if all of them can take the returned gradients:
        reads of the leaves, in the call's block, before any other backward or step."""
        line = self.analysis.parent(statement)
        block = self.analysis.parent(line) if line is not None else None
        if block is None:
            return None
        after = self.analysis.end_index(call)
        writers = [self.analysis.index(w) for w in _grad_writers(scope)]
        next_writer = min((w for w in writers if w > after), default=None)
        reads: list[GradRead] = []
        for attr in _grad_attributes(scope):
            position = self.analysis.index(attr)
            if position < after or self.analysis.qualified_name(attr):
                continue
            leaf = attr.value.value if isinstance(attr.value, cst.Name) else None
            if leaf not in leaves or not self.analysis.contains(block, attr):
                return None
            if next_writer is not None and position > next_writer:
                return None
            if self._is_store(attr) or self._in_loop_with_writer(attr, call, scope):
                return None
            reads.append(GradRead(attr, leaf))
        return reads

    def _is_store(self, attr: cst.Attribute) -> bool:
        parent = self.analysis.parent(attr)
        return isinstance(parent, (cst.AssignTarget, cst.AugAssign, cst.Del)) or (
            isinstance(parent, cst.Element)
            and isinstance(self.analysis.parent(parent), (cst.Tuple, cst.List))
            and any(isinstance(a, cst.AssignTarget) for a in self.analysis.ancestors(parent))
        )

    def _in_loop_with_writer(self, read: cst.CSTNode, call: cst.Call, scope: cst.CSTNode) -> bool:
        """``read`` repeats in a loop (not around ``call``) that also runs a backward/step."""
        for loop in self.analysis.ancestors(read):
            if loop is scope:
                return False
            if isinstance(loop, (cst.For, cst.While)) and not self.analysis.contains(loop, call):
                if any(self.analysis.contains(loop, w) for w in _grad_writers(loop)):
                    return True
        return False


def _names(node: cst.CSTNode) -> Iterator[cst.Name]:
    collector = _Collect(cst.Name)
    walk(node, collector)
    yield from collector.found  # type: ignore[misc]


def _grad_attributes(node: cst.CSTNode) -> list[cst.Attribute]:
    collector = _Collect(cst.Attribute)
    walk(node, collector)
    return [a for a in collector.found if isinstance(a, cst.Attribute) and a.attr.value == "grad"]


def _grad_writers(node: cst.CSTNode) -> list[cst.Call]:
    """Calls that may write ``.grad``: ``backward()`` / ``autograd.backward`` / ``step()``."""
    collector = _Collect(cst.Call)
    walk(node, collector)
    return [
        c
        for c in collector.found
        if isinstance(c, cst.Call)
        and isinstance(c.func, cst.Attribute)
        and c.func.attr.value in GRAD_WRITERS
    ]


class _Collect(cst.CSTVisitor):
    def __init__(self, kind: type[cst.CSTNode]) -> None:
        self.kind = kind
        self.found: list[cst.CSTNode] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        if isinstance(node, self.kind):
            self.found.append(node)
        return True
