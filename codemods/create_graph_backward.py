"""GF402 create-graph-backward."""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import libcst as cst

from gradfix.edits import Editor, as_keyword
from gradfix.rule import Edit, FixAvailability, FixPlan, FixSafety, Invalid, Rule, Valid
from gradfix.semantic import (
    VIEW_ATTRIBUTES,
    argument,
    argument_value,
    argument_values,
    call_arguments,
    is_true,
    is_unpacked,
)
from gradfix.semantic.syntax import is_backward_call, is_concatenated_string, spelled_names
from gradfix.torch_facts import FACTORIES
from gradfix.walk import children

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
_LOOPS = (ast.For, ast.AsyncFor, ast.While)
#: Scopes nested in a scope: a use in one may run at any time.
_NESTED_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


@dataclass
class GradRead:
    """``x.grad`` read after the backward call: replaced by the returned gradient."""

    node: ast.Attribute
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

    When the gradient read from `.grad` is backpropagated again in the same block
    (`dydx = x.grad; dydx.backward()`: a second derivative), `.grad` still holds `dydx`
    and the second pass adds to it: `x.grad` then reads `dydx + d2ydx2`. The fix sets
    `x.grad = None` before that second pass (when nothing resets it already), so `x.grad`
    holds the second derivative the code reads it for.
    """

    code = "GF402"
    calls = frozenset({"backward"})
    name = "create-graph-backward"
    synopsis = (
        "Finds `loss.backward(create_graph=True)`, a reference cycle that leaks memory, "
        "and rewrites it to `torch.autograd.grad(..., create_graph=True)`."
    )
    message = (
        "`backward(create_graph=True)` makes a reference cycle between each leaf and its "
        "`.grad` (memory leak); use `torch.autograd.grad(loss, inputs, create_graph=True)` "
        "or reset `.grad = None` after use"
    )
    fix_safety = FixSafety.SAFE
    fix_availability = FixAvailability.SOMETIMES

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
        Invalid(
            """
            import torch


            def curvature(t):
                t = t.clone().requires_grad_()
                energy = torch.sin(t).sum()
                energy.backward(create_graph=True)
                slope = t.grad
                # differentiate the slope once more
                slope.sum().backward()
                return slope.detach(), t.grad
            """,
            """
            import torch


            def curvature(t):
                t = t.clone().requires_grad_()
                energy = torch.sin(t).sum()
                energy.backward(create_graph=True)
                slope = t.grad
                # differentiate the slope once more
                t.grad = None
                slope.sum().backward()
                return slope.detach(), t.grad
            """,
        ),
    ]

    def visit_Call(self, node: ast.Call) -> None:
        root = self._create_graph_root(node)
        if root is None or not self.analysis.imports_torch():
            return
        self.report(node, fix=self._fix(node, root) or self._reset_fix(node, root))

    # -- a second pass through a gradient read from ``.grad`` ----------------------------
    def _reset_fix(self, call: ast.Call, root: ast.expr) -> FixPlan | None:
        """``g = x.grad; g.backward()`` after ``y.backward(create_graph=True)``: the second
        pass adds to ``x.grad``, which still holds ``g``; reset it first."""
        statement = self.analysis.parent(call)
        if type(statement) is not ast.Expr or self.analysis.in_no_grad(call):
            return None
        leaves = self._graph_leaves(root, call, 0)
        if not leaves or not self._grad_empty_before(call, leaves):
            return None
        block = self.analysis.statement_block(statement) or []
        later = [
            s
            for s in block
            if self.analysis.index(s) > self.analysis.index(statement)
            and type(s) is ast.Expr
            and type(s.value) is ast.Call
            and is_backward_call(s.value)
        ]
        if not later:
            return None
        second = later[0]
        assert isinstance(second, ast.Expr) and isinstance(second.value, ast.Call)
        read = self._grad_feeding(second.value, statement, set(leaves))
        if read is None or self._grad_reset_between(statement, second, read):
            return None

        def build(editor: Editor) -> list[Edit]:
            line = editor.statement(second)
            reset = cst.parse_statement(f"{read}.grad = None\n")
            reset = reset.with_changes(leading_lines=line.leading_lines)
            return [Edit(line, cst.FlattenSentinel([reset, line.with_changes(leading_lines=())]))]

        return self.plan(build, f"Reset `{read}.grad` before the second backward pass")

    def _grad_feeding(self, second: ast.Call, first: ast.stmt, leaves: set[str]) -> str | None:
        """The leaf whose ``.grad`` (read after ``first``) the root of ``second`` is built
        from, directly or through one name (``dydx = x.grad; dydx.sum().backward()``)."""
        root = second.func.value  # type: ignore[attr-defined]
        for node in ast.walk(root):
            value = node
            if type(node) is ast.Name:
                binding = self.analysis.reaching_binding(node, second)
                if binding is None or binding.kind != "assign" or binding.value is None:
                    continue
                if self.analysis.index(binding.node) < self.analysis.index(first):
                    continue
                value = binding.value
            leaf = _grad_of(value)
            if leaf in leaves:
                return leaf
        return None

    def _grad_reset_between(self, first: ast.stmt, second: ast.stmt, leaf: str) -> bool:
        """``leaf.grad`` is stored, deleted or zeroed between the two passes."""
        start, end = self.analysis.index(first), self.analysis.index(second)
        scope = self.analysis.scope_of(first).node
        for attr in _grad_attributes(scope, self.analysis.index):
            if not start < self.analysis.index(attr) < end:
                continue
            if type(attr.value) is not ast.Name or attr.value.id != leaf:
                continue
            parent = self.analysis.parent(attr)
            if self._is_store(attr) or (
                type(parent) is ast.Attribute and parent.attr.endswith("_")
            ):
                return True
        return False

    # -- the call ------------------------------------------------------------------------
    def _positions(self, call: ast.Call) -> dict[str, int] | None:
        name = self.analysis.call_name(call)
        if name == "torch.autograd.backward":
            return AUTOGRAD_BACKWARD
        if name is None and is_backward_call(call):
            return TENSOR_BACKWARD
        return None

    def _create_graph_root(self, call: ast.Call) -> ast.expr | None:
        """The tensor ``call`` differentiates when it passes ``create_graph=True``."""
        positions = self._positions(call)
        if positions is None or any(is_unpacked(arg) for arg in call_arguments(call)):
            return None
        create = argument(call, "create_graph", positions["create_graph"])
        if not is_true(create):
            return None  # a flag variable: timm's scalers pass False unless asked
        if positions is TENSOR_BACKWARD:
            assert isinstance(call.func, ast.Attribute)
            return call.func.value
        return argument(call, "tensors", 0)

    # -- the fix -------------------------------------------------------------------------
    def _fix(self, call: ast.Call, root: ast.expr) -> FixPlan | None:
        statement = self.analysis.parent(call)
        if type(statement) is not ast.Expr or self.analysis.in_no_grad(call):
            return None
        leaves = self._graph_leaves(root, call, 0)
        if not leaves or argument(call, "inputs", None) is not None:
            return None
        scope = self.analysis.scope_of(call)
        if any(not self._leaf_is_private(leaf, scope.node) for leaf in leaves):
            return None
        if not self._grad_empty_before(call, leaves):
            return None
        reads = self._grad_reads_after(call, statement, set(leaves), scope.node)
        if reads is None or {read.leaf for read in reads} != set(leaves):
            return None
        if self._other_positional(call, root):
            return None
        return self._rewrite(call, statement, root, reads)

    def _other_positional(self, call: ast.Call, root: ast.expr) -> bool:
        """``call`` passes a positional option other than the gradient: no keyword of
        ``torch.autograd.grad`` is known to take it."""
        positions = self._positions(call) or {}
        return any(
            arg is not root and index != positions["gradient"]
            for index, arg in enumerate(call.args)
        )

    def _rewrite(
        self, call: ast.Call, statement: ast.Expr, root: ast.expr, reads: list[GradRead]
    ) -> FixPlan:
        order = list(dict.fromkeys(read.leaf for read in reads))
        gradient = self._positions(call) or {}

        def build(editor: Editor) -> list[Edit]:
            node, line, root_node = editor.node(call), editor.node(statement), editor.node(root)
            assert isinstance(node, cst.Call) and isinstance(line, cst.Expr)
            used = {n.value for n in _names(editor.module)}
            names = {leaf: _fresh_name(f"{leaf}_grad", used) for leaf in order}
            inputs: cst.BaseExpression = cst.Name(order[0])
            if len(order) > 1:
                inputs = cst.Tuple([cst.Element(cst.Name(leaf)) for leaf in order])
            grad_call = cst.Call(
                func=editor.torch_attr("autograd.grad"),
                args=_grad_arguments(node, root_node, inputs, gradient["gradient"]),
                whitespace_before_args=node.whitespace_before_args,
            )
            targets = [cst.Element(cst.Name(names[leaf])) for leaf in order]
            # ``(x_grad,) = ...`` for one input, ``x_grad, w_grad = ...`` for several
            target = (
                cst.Tuple(targets) if len(targets) == 1 else cst.Tuple(targets, lpar=[], rpar=[])
            )
            assign = cst.Assign([cst.AssignTarget(target)], grad_call, line.semicolon)
            edits = [Edit(line, assign)]
            edits += [Edit(editor.node(read.node), cst.Name(names[read.leaf])) for read in reads]
            return edits

        imports = () if self.analysis.torch_alias() else ("torch",)
        return self.plan(build, "Use `torch.autograd.grad`", imports=imports)

    # -- which leaves the loss depends on -------------------------------------------------
    def _graph_leaves(self, expr: ast.expr, at: ast.AST, depth: int) -> dict[str, ast.AST] | None:
        """The local leaf names ``expr`` depends on (name -> its binding statement), or None
        when some part of its graph is unknown (a layer, a function, an argument)."""
        if depth > _MAX_DEPTH:
            return None
        if isinstance(expr, ast.Constant):
            known = expr.value is not ... and not is_concatenated_string(expr, self.context.source)
            return {} if known else None
        if isinstance(expr, ast.Name):
            return self._name_leaves(expr, at, depth)
        if isinstance(expr, ast.Attribute):
            if expr.attr in DETACHING or self.analysis.qualified_name(expr):
                return {}
            if expr.attr in VIEW_ATTRIBUTES:
                return self._graph_leaves(expr.value, at, depth + 1)
            return None
        if isinstance(expr, ast.Subscript):
            return self._graph_leaves(expr.value, at, depth + 1)
        if isinstance(expr, ast.BinOp):
            return self._union([expr.left, expr.right], at, depth)
        if isinstance(expr, ast.UnaryOp):
            return self._graph_leaves(expr.operand, at, depth + 1)
        if isinstance(expr, (ast.Tuple, ast.List)):
            return self._union([argument_value(e) for e in expr.elts], at, depth)
        if isinstance(expr, ast.Call):
            return self._call_leaves(expr, at, depth)
        return None

    def _name_leaves(self, name: ast.Name, at: ast.AST, depth: int) -> dict[str, ast.AST] | None:
        reason = self.analysis.leaf_reason(name, at)
        binding = self.analysis.reaching_binding(name, at)
        if reason is not None:
            if binding is None or binding.kind != "assign":
                return None  # a parameter of the function or a loop variable
            return {name.id: binding.node}
        if binding is None:
            return {} if self.analysis.qualified_name(name) else None
        if binding.kind != "assign" or binding.value is None or binding.unpack_index is not None:
            return None
        return self._graph_leaves(binding.value, binding.node, depth + 1)

    def _call_leaves(self, call: ast.Call, at: ast.AST, depth: int) -> dict[str, ast.AST] | None:
        func = call.func
        name = self.analysis.call_name(call)
        arguments = argument_values(call)
        if name is not None:
            if not name.startswith("torch.") or name.startswith(("torch.nn.", "torch.optim")):
                if not name.startswith("torch.nn.functional."):
                    return None
            if name in FACTORIES:
                return {} if not is_true(argument(call, "requires_grad", None)) else None
            return self._union(arguments, at, depth)
        if type(func) is not ast.Attribute:
            return None
        if func.attr in DETACHING:
            return {}
        receiver = self._graph_leaves(func.value, at, depth + 1)
        if receiver is None or (arguments and func.attr not in TENSOR_METHODS):
            # ``x.sum(dim=0)``-like options are fine; tensor arguments of unknown methods not
            if any(self._graph_leaves(a, at, depth + 1) != {} for a in arguments):
                return None
        if receiver is None:
            return None
        others = self._union(arguments, at, depth)
        return None if others is None else {**receiver, **others}

    def _union(self, exprs: list[ast.expr], at: ast.AST, depth: int) -> dict[str, ast.AST] | None:
        found: dict[str, ast.AST] = {}
        for expr in exprs:
            leaves = self._graph_leaves(expr, at, depth + 1)
            if leaves is None:
                return None
            found.update(leaves)
        return found

    # -- where the leaves and their gradients go ----------------------------------------------
    def _leaf_is_private(self, leaf: str, scope: ast.AST) -> bool:
        """Every use of ``leaf`` in its scope is a tensor op, an attribute or a binding:
        no optimizer, container, function or closure can read its ``.grad``.

        Every identifier spelled ``leaf`` counts (an attribute's or a keyword's name too)."""
        for use in ast.walk(scope):
            private = self._private_spelling(use, leaf)
            if private is None:
                continue
            if not private or self._in_nested_scope(use, scope):
                return False
        return True

    def _in_nested_scope(self, node: ast.AST, scope: ast.AST) -> bool:
        """``node`` is in a function, lambda or class defined inside ``scope``."""
        for ancestor in self.analysis.ancestors(node):
            if ancestor is scope:
                return False
            if isinstance(ancestor, _NESTED_SCOPES):
                return True
        return False

    def _private_spelling(self, node: ast.AST, leaf: str) -> bool | None:
        """Whether ``node`` spells ``leaf`` in a use that keeps it private (None: it does
        not spell ``leaf``)."""
        if isinstance(node, ast.Name):
            return self._is_private_use(node) if node.id == leaf else None
        if isinstance(node, ast.Attribute):
            return self._is_private_in(node) if node.attr == leaf else None
        if isinstance(node, ast.keyword):
            return self._is_private_in(node) if node.arg == leaf else None
        if isinstance(node, ast.arg):
            return True if node.arg == leaf else None
        return _import_head(node, leaf) if leaf in spelled_names(node) else None

    def _is_private_use(self, use: ast.Name) -> bool:
        parent = self.analysis.parent(use)
        if type(parent) is ast.Attribute:
            return True
        if type(parent) is ast.Assign and any(t is use for t in parent.targets):
            return True
        return self._is_private_in(use)

    def _is_private_in(self, child: ast.AST) -> bool:
        """What encloses ``child`` uses it as a tensor: an operand, an argument of a torch
        op, an expression statement."""
        for ancestor in self.analysis.ancestors(child):
            if type(ancestor) is ast.Call and child is not ancestor.func:
                return self._is_tensor_call(ancestor)
            if isinstance(ancestor, (ast.BinOp, ast.UnaryOp, ast.Subscript, ast.Compare)):
                return True
            if isinstance(ancestor, (ast.stmt, ast.List, ast.Tuple, ast.Set, ast.Dict)):
                return type(ancestor) is ast.Expr
            child = ancestor
        return False

    def _is_tensor_call(self, call: ast.Call) -> bool:
        name = self.analysis.call_name(call)
        if name is not None:
            return name.startswith("torch.") and not name.startswith(
                ("torch.optim", "torch.nn.Parameter", "torch.nn.utils")
            )
        func = call.func
        if type(func) is ast.Name:
            return func.id == "print"
        return type(func) is ast.Attribute and func.attr in TENSOR_METHODS

    def _grad_empty_before(self, call: ast.Call, leaves: dict[str, ast.AST]) -> bool:
        """No backward pass could have filled the leaves' ``.grad`` before ``call``."""
        scope = self.analysis.scope_of(call).node
        start = min(self.analysis.end_index(node) for node in leaves.values())
        for loop in self.analysis.ancestors(call):
            if loop is scope:
                break
            if isinstance(loop, _LOOPS) and start < self.analysis.index(loop):
                return False  # the leaf lives across iterations: ``.grad`` accumulates
        end = self.analysis.index(call)
        return not any(start < self.analysis.index(other) < end for other in _grad_writers(scope))

    def _grad_reads_after(
        self, call: ast.Call, statement: ast.Expr, leaves: set[str], scope: ast.AST
    ) -> list[GradRead] | None:
        """The ``.grad`` reads after ``call``, if all of them can take the returned gradients:
        reads of the leaves, in the call's block, before any other backward or step."""
        in_block = self._block_of(statement)
        after = self.analysis.end_index(call)
        writers = [self.analysis.index(w) for w in _grad_writers(scope)]
        next_writer = min((w for w in writers if w > after), default=None)
        reads: list[GradRead] = []
        for attr in _grad_attributes(scope, self.analysis.index):
            position = self.analysis.index(attr)
            if position < after or self.analysis.qualified_name(attr):
                continue
            leaf = attr.value.id if type(attr.value) is ast.Name else None
            if leaf not in leaves or not in_block(attr):
                return None
            if next_writer is not None and position > next_writer:
                return None
            if self._is_store(attr) or self._in_loop_with_writer(attr, call, scope):
                return None
            reads.append(GradRead(attr, leaf))
        return reads

    def _block_of(self, statement: ast.Expr) -> Callable[[ast.AST], bool]:
        """Whether a node is in the block of ``statement`` as LibCST holds it: a one-line
        suite (``if c: y.backward(...)``) belongs to its header's whole clause."""
        analysis = self.analysis
        block = analysis.statement_block(statement) or []
        owner = analysis.parent(statement)
        if owner is not None and analysis.in_one_line_suite(statement):
            if getattr(owner, "body", None) is block:
                return lambda node: analysis.contains(owner, node)
        return lambda node: analysis.block_contains(block, node)

    def _is_store(self, attr: ast.Attribute) -> bool:
        """``x.grad = ...``, ``x.grad += ...``, ``del x.grad``, ``a, x.grad = ...``."""
        parent = self.analysis.parent(attr)
        if isinstance(parent, ast.Assign):
            return any(t is attr for t in parent.targets)
        if isinstance(parent, ast.AugAssign):
            return True  # the target, also the value (``total += x.grad``)
        if isinstance(parent, ast.Delete):
            return len(parent.targets) == 1  # ``del x.grad, y`` deletes a tuple's items
        if isinstance(parent, (ast.Tuple, ast.List)) and not self._indices(parent):
            return self._in_assign_target(parent)
        return False

    def _indices(self, node: ast.Tuple | ast.List) -> bool:
        """``x[a, b]``: the indices of a subscript, not a tuple (``x[(a, b)]``)."""
        subscript = self.analysis.parent(node)
        if not isinstance(subscript, ast.Subscript) or subscript.slice is not node:
            return False
        return not (self.analysis.segment(node) or "").startswith("(")

    def _in_assign_target(self, node: ast.AST) -> bool:
        child = node
        for ancestor in self.analysis.ancestors(node):
            if isinstance(ancestor, ast.Assign):
                return any(t is child for t in ancestor.targets)
            child = ancestor
        return False

    def _in_loop_with_writer(self, read: ast.AST, call: ast.Call, scope: ast.AST) -> bool:
        """``read`` repeats in a loop (not around ``call``) that also runs a backward/step."""
        for loop in self.analysis.ancestors(read):
            if loop is scope:
                return False
            if isinstance(loop, _LOOPS) and not self.analysis.contains(loop, call):
                if any(self.analysis.contains(loop, w) for w in _grad_writers(loop)):
                    return True
        return False


def _grad_arguments(
    call: cst.Call, root: cst.CSTNode, inputs: cst.BaseExpression, gradient: int
) -> list[cst.Arg]:
    """``root, inputs`` then the call's options (``gradient`` as ``grad_outputs``); the
    rule left calls with other positional options without a fix."""
    space = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    kept: list[cst.Arg] = []
    for index, arg in enumerate(call.args):
        keyword = arg.keyword.value if arg.keyword else None
        if arg.value is root:
            continue
        if keyword in ("gradient", "grad_tensors") or (keyword is None and index == gradient):
            arg = as_keyword(arg, "grad_outputs")
        kept.append(arg)
    last_comma = space if kept else cst.MaybeSentinel.DEFAULT
    assert isinstance(root, cst.BaseExpression)
    return [cst.Arg(root, comma=space), cst.Arg(inputs, comma=last_comma), *kept]


def _fresh_name(wanted: str, used: set[str]) -> str:
    name, counter = wanted, 2
    while name in used:
        name, counter = f"{wanted}{counter}", counter + 1
    return name


def _names(node: cst.CSTNode) -> Iterator[cst.Name]:
    """Every identifier of the LibCST tree: the names the fix must not shadow."""
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, cst.Name):
            yield current
        stack.extend(children(current))


def _import_head(node: ast.AST, leaf: str) -> bool:
    """``import x.y``: ``x`` is the only spelling of ``leaf`` and the head of a dotted
    name (LibCST's attribute value)."""
    if isinstance(node, ast.alias):
        dotted = node.name
    elif isinstance(node, ast.ImportFrom):
        dotted = node.module or ""
    else:
        return False
    return spelled_names(node).count(leaf) == 1 and dotted.startswith(f"{leaf}.")


def _grad_attributes(node: ast.AST, order: Callable[[ast.AST], int]) -> list[ast.Attribute]:
    """The ``.grad`` attributes under ``node`` in source order."""
    found = [a for a in ast.walk(node) if type(a) is ast.Attribute and a.attr == "grad"]
    return sorted(found, key=order)  # type: ignore[arg-type]


def _grad_of(expr: ast.AST) -> str | None:
    """``x`` for ``x.grad``."""
    if type(expr) is ast.Attribute and expr.attr == "grad" and type(expr.value) is ast.Name:
        return expr.value.id
    return None


def _grad_writers(node: ast.AST) -> list[ast.Call]:
    """Calls that may write ``.grad``: ``backward()`` / ``autograd.backward`` / ``step()``."""
    return [
        c
        for c in ast.walk(node)
        if type(c) is ast.Call and type(c.func) is ast.Attribute and c.func.attr in GRAD_WRITERS
    ]
