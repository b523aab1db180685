"""GF110 loss-on-indices."""

from __future__ import annotations

import ast

from gradfix.rule import FixAvailability, FixSafety, Invalid, Rule, Valid
from gradfix.semantic import Binding
from gradfix.semantic.syntax import (
    argument_values,
    combined_values,
    constructs_a_class,
    source_segment,
)
from gradfix.torch_facts import (
    FACTORIES,
    GRAD_CUTTING_METHODS,
    INDEX_OPS,
    INTEGER_CASTS,
    NN_PARAMETER_LAYERS,
    VALUES_INDICES_OPS,
    VIEW_ATTRIBUTES,
)

#: how deep the walk back from the loss follows names and calls
_DEPTH = 12


class LossOnIndices(Rule):
    """
    ## What it does
    Finds a value that is backpropagated (`loss.backward()`, `torch.autograd.grad(loss,
    ...)`) but reaches the model's outputs only through ops whose results are integer
    indices or booleans: `argmax`, `argmin`, `argsort`, the indices of `torch.max(x, 1)`,
    `.long()`, or a comparison (`scores > 0.5`). Reported without a fix.

    ## Why is this bad?
    Indices and booleans are not differentiable: the gradient of `argmax` is zero almost
    everywhere and autograd does not record it at all. The loss is a constant to
    autograd, so `backward()` raises "element 0 of tensors does not require grad and does
    not have a grad_fn" (or, when another term requires grad, silently trains nothing
    through the indices).

    ## Example
    ```python
    scores = model(x)                      # (batch, bins)
    pred = torch.argmax(scores, dim=1).float() / bins
    loss = F.l1_loss(pred, target)
    loss.backward()
    ```

    ## Use instead
    A differentiable surrogate of the same quantity: the expectation under the softmax
    (a "soft argmax"), a loss on the scores themselves (cross-entropy against the target
    bin), or a straight-through / Gumbel-softmax estimator.
    ```python
    bins_values = torch.arange(bins, dtype=scores.dtype)
    pred = (scores.softmax(dim=1) * bins_values).sum(dim=1) / bins
    loss = F.l1_loss(pred, target)         # or F.cross_entropy(scores, target_bin)
    loss.backward()
    ```

    A loss with another path to the outputs (`ce + penalty(argmax)`, a REINFORCE
    `-log_prob(action) * reward`, a straight-through `(hard - soft).detach() + soft`) is
    not reported, nor are indices used only to read values (`scores.gather(1, idx)`).

    ## Fix safety
    No fix: which surrogate is right (the softmax expectation, cross-entropy on the
    bins, a straight-through estimator) depends on what the indices mean, and each
    changes the loss's value.
    """

    code = "GF110"
    calls = frozenset({"backward", "grad"})
    name = "loss-on-indices"
    synopsis = (
        "Finds a backpropagated loss that reaches the model only through integer or "
        "boolean results (`argmax`, comparisons), so no gradient flows; report only."
    )
    message = (
        "Loss computed from integer indices or booleans: no gradient flows through "
        "`argmax`/comparisons back to the scores; use a differentiable surrogate "
        "(softmax expectation, cross-entropy on the scores)"
    )
    fix_safety = FixSafety.UNSAFE
    fix_availability = FixAvailability.NEVER

    VALID = [
        Valid(
            """
            import torch
            import torch.nn as nn
            import torch.nn.functional as F

            model = nn.Linear(4, 3)
            x, y = torch.randn(8, 4), torch.randint(0, 3, (8,))
            scores = model(x)
            loss = F.cross_entropy(scores, y)
            accuracy = (scores.argmax(dim=1) == y).float().mean()
            picked = scores.gather(1, scores.argmax(dim=1, keepdim=True))
            penalty = (scores.argmax(dim=1) != y).float().mean()
            (loss + penalty + picked.mean()).backward()
            """
        ),
        Valid(
            """
            import torch
            from torch import nn

            policy = nn.Linear(4, 2)
            logits = policy(torch.randn(4))
            dist = torch.distributions.Categorical(logits=logits)
            action = logits.argmax()
            loss = -dist.log_prob(action) * 1.5
            loss.backward()

            soft = policy(torch.randn(4)).softmax(-1)
            hard = torch.nn.functional.one_hot(soft.argmax(-1), 2).float()
            straight = (hard - soft).detach() + soft
            straight.sum().backward()
            """
        ),
        Valid(
            """
            import torch as th

            w = th.tensor([0.5, 1.0, -0.25], requires_grad=True)
            d = w * th.tensor([2.0, 1.0, 4.0]) - 1.0
            core = (d.abs() < 0.1).float()
            loss = (core * d ** 2 + (1 - core) * d.abs()).mean()
            loss.backward()
            p = w ** 2 / (w ** 2).sum()
            entropy = -th.where(p > 0, p * th.log(p.clamp_min(1e-12)), th.zeros_like(p)).sum()
            entropy.backward()
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            import torch.nn as nn
            import torch.nn.functional as F

            head = nn.Conv2d(8, 3 * 65, 1)
            target = torch.rand(4, 4, 3)
            out_x, out_y, out_z = head(torch.randn(1, 8, 4, 4)).squeeze(0).split(65, dim=0)
            coords = torch.stack(
                [torch.argmax(out_x, 0), torch.argmax(out_y, 0), out_z.argmax(0)],  # bins
                dim=2,
            )
            coords[coords == 64] = 0
            coords = 2.0 * coords.float() / 63 - 1.0
            loss = F.l1_loss(coords, target)
            loss.backward()
            """,
            report_only=True,
        ),
        Invalid(
            """
            import torch as th
            from torch import nn

            class Net(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.fc = nn.Linear(4, 1)

                def forward(self, x):
                    return th.sigmoid(self.fc(x))

            def train_step(model, x, y, optimizer):
                optimizer.zero_grad()
                pred = (model(x) > 0.5).float()
                loss = ((pred - y) ** 2).mean()
                loss.backward()
                optimizer.step()

            model = Net()
            train_step(model, th.randn(8, 4), th.ones(8, 1), th.optim.SGD(model.parameters(), 0.1))
            _, idx = th.max(model(th.randn(8, 4)), 1)
            th.autograd.grad(idx.float().sum(), list(model.parameters()))
            """,
            report_only=True,
        ),
    ]

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if type(func) is not ast.Attribute or func.attr not in ("backward", "grad"):
            return
        scope = self.analysis.scope_of(node).node
        for root, call in self.analysis.backward_roots(scope):
            if call is node:
                cuts: list[ast.expr] = []
                if not self._flows_grad(root, node, 0, cuts) and cuts:
                    first = min(cuts, key=self.analysis.index)
                    self.report(first, _message(first, root, self.context.source))

    # -- the walk back from the loss ---------------------------------------------------------
    def _flows_grad(self, expr: ast.AST, at: ast.AST, depth: int, cuts: list[ast.expr]) -> bool:
        """``expr`` has a gradient path that does not go through indices (unknown: True);
        the index and comparison ops that cut a path that required grad go in ``cuts``."""
        if depth > _DEPTH:
            return True
        if isinstance(expr, ast.Constant):
            return False
        if isinstance(expr, ast.Name):
            return self._name_flows(expr, at, depth, cuts)
        if isinstance(expr, ast.Call):
            return self._call_flows(expr, at, depth, cuts)
        if isinstance(expr, ast.Compare):
            return self._cut(expr, [expr.left, *expr.comparators], at, depth, cuts)
        if isinstance(expr, ast.Subscript):
            if self._indices_of_pair(expr):
                return self._cut(expr, [self._read_tensor(expr.value)], at, depth, cuts)
            return self._flows_grad(expr.value, at, depth + 1, cuts)
        if isinstance(expr, ast.Attribute):
            return self._attribute_flows(expr, at, depth, cuts)
        parts = combined_values(expr)
        if parts is None:
            return self.analysis.requires_grad(expr, at)
        return any([self._flows_grad(part, at, depth + 1, cuts) for part in parts])

    def _attribute_flows(
        self, expr: ast.Attribute, at: ast.AST, depth: int, cuts: list[ast.expr]
    ) -> bool:
        if expr.attr == "indices" and self._values_indices(expr.value):
            return self._cut(expr, [self._read_tensor(expr.value)], at, depth, cuts)
        if expr.attr in VIEW_ATTRIBUTES:
            return self._flows_grad(expr.value, at, depth + 1, cuts)
        return self.analysis.requires_grad(expr, at)

    def _name_flows(self, name: ast.Name, at: ast.AST, depth: int, cuts: list[ast.expr]) -> bool:
        binding = self.analysis.reaching_binding(name, at)
        if binding is None or binding.kind != "assign" or binding.value is None:
            return self.analysis.requires_grad(name, at)
        if binding.unpack_index is not None:
            return self._unpacked_flows(binding, depth, cuts)
        flows = self._flows_grad(binding.value, binding.node, depth + 1, cuts)
        for statement, value in self.analysis.index_assignments(name, at):
            flows = self._flows_grad(value, statement, depth + 1, cuts) or flows
        return flows

    def _unpacked_flows(self, binding: Binding, depth: int, cuts: list[ast.expr]) -> bool:
        """``_, idx = torch.max(scores, 1)``: the indices cut; ``a, b = f(x)``: what a
        function of the file returns there, else whatever ``f(x)`` carries."""
        value, index = binding.value, binding.unpack_index
        assert value is not None and index is not None
        if index == 1 and self._values_indices(value):
            return self._cut(value, [self._read_tensor(value)], binding.node, depth, cuts)
        returned = self.analysis.unpacked_call_values(binding)
        if returned:
            return any([self._flows_grad(v, at, depth + 1, cuts) for v, at in returned])
        return self._flows_grad(value, binding.node, depth + 1, cuts)

    def _call_flows(self, call: ast.Call, at: ast.AST, depth: int, cuts: list[ast.expr]) -> bool:
        func = call.func
        method = type(func) is ast.Attribute and self.analysis.qualified_name(func) is None
        short = _short_name(call)
        if short in INDEX_OPS or (short in INTEGER_CASTS and method):
            return self._cut(call, [self._read_tensor(call)], at, depth, cuts)
        module_class = self.analysis.nn_module_class(func, at)
        if module_class is not None and module_class not in NN_PARAMETER_LAYERS:
            operands = argument_values(call)  # ``nn.L1Loss()(a, b)``: its functional op
        elif method:
            assert isinstance(func, ast.Attribute)
            if func.attr in GRAD_CUTTING_METHODS:
                return False
            if self.analysis.is_module(func, at) or self.analysis.local_function(func, at):
                return self.analysis.requires_grad(call, at)
            operands = [func.value, *argument_values(call)]
        else:
            name = self.analysis.call_name(call) or ""
            if name in FACTORIES:
                return self.analysis.leaf_reason(call, at) is not None  # ``requires_grad=True``
            if not name.startswith("torch.") or constructs_a_class(name):
                return self.analysis.requires_grad(call, at)
            operands = argument_values(call)
        return any([self._flows_grad(arg, at, depth + 1, cuts) for arg in operands])

    def _cut(
        self, op: ast.expr, inputs: list[ast.expr], at: ast.AST, depth: int, cuts: list[ast.expr]
    ) -> bool:
        """An op whose result has no gradient: recorded when one of its inputs had one."""
        if any(self._flows_grad(value, at, depth + 1, []) for value in inputs):
            cuts.append(op)
        return False

    def _read_tensor(self, call: ast.expr) -> ast.expr:
        """The tensor an op reads: ``x`` of ``x.argmax()`` and of ``torch.argmax(x)``."""
        assert isinstance(call, ast.Call)
        func = call.func
        if type(func) is ast.Attribute and self.analysis.qualified_name(func) is None:
            return func.value
        return call.args[0] if call.args else func

    def _values_indices(self, value: ast.expr) -> bool:
        """``torch.max(x, 1)``, ``x.topk(3)``: a ``(values, indices)`` pair."""
        if type(value) is not ast.Call or _short_name(value) not in VALUES_INDICES_OPS:
            return False
        given = len(value.args) + len(value.keywords)
        receiver = (
            type(value.func) is ast.Attribute and self.analysis.qualified_name(value.func) is None
        )
        return given >= (1 if receiver else 2) or _short_name(value) in ("topk", "sort")

    def _indices_of_pair(self, subscript: ast.Subscript) -> bool:
        index = subscript.slice
        return (
            type(index) is ast.Constant
            and index.value == 1
            and self._values_indices(subscript.value)
        )


def _short_name(call: ast.Call) -> str | None:
    func = call.func
    if type(func) is ast.Attribute:
        return func.attr
    return func.id if type(func) is ast.Name else None


def _message(cut: ast.expr, root: ast.expr, source: str) -> str:
    if isinstance(cut, ast.Compare):
        op = "a comparison"
    elif isinstance(cut, ast.Call):
        op = f"`{_short_name(cut)}`"
    else:
        op = "the indices of a max/sort"
    loss = source_segment(source, root) or "the loss"
    if len(loss) > 30 or "\n" in loss:
        loss = "the loss"
    else:
        loss = f"`{loss}`"
    return (
        f"{loss} reaches the model's outputs only through {op}, whose result has no "
        "gradient: backward() fails or trains nothing; use a differentiable surrogate "
        "(softmax expectation, cross-entropy on the scores)"
    )
