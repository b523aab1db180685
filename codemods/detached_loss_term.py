"""GF408 detached-loss-term."""

from __future__ import annotations

import ast

from gradfix.edits import attribute_owner, method_receiver
from gradfix.rule import FixAvailability, FixPlan, FixSafety, Invalid, Rule, Valid
from gradfix.semantic import Binding
from gradfix.semantic.syntax import (
    argument_values,
    combined_values,
    constructs_a_class,
    is_number_literal,
)
from gradfix.torch_facts import (
    FACTORIES,
    GRAD_CUTTING_METHODS,
    NN_NON_LAYERS,
    VIEW_ATTRIBUTES,
)

#: how deep the walk back from the loss follows names and calls
_DEPTH = 12
#: methods whose result keeps the value but leaves the graph: the cuts this rule reports
#: (with the ``.data`` attribute)
_DETACHING = frozenset({"detach", "item"})
#: ``nn`` classes whose call runs no parameter of its own: a loss or an activation applies
#: its functional op to its arguments (``nn.BCELoss()(pred, label)``)
_CONTAINERS = frozenset(
    "Module ModuleList ModuleDict Sequential ParameterList ParameterDict".split()
)


class DetachedLossTerm(Rule):
    """
    ## What it does
    Finds a term of a backpropagated loss (`total = a + w * b; total.backward()`) that
    carries no gradient because its only path to the model was cut by `.detach()` (or
    `.item()`) while the other terms train: `pred_fake = netD(fake).detach()` in a GAN's
    generator step, `loss = ce + lam * reg.item()`.

    ## Why is this bad?
    A term without gradient is a constant to autograd: it changes the printed loss and
    nothing else. The generator never feels the adversarial loss, the regulariser never
    regularises, and nothing fails: training runs, slower or toward the wrong optimum.
    Intentional stop-gradients sit *inside* a term (`mse(z_q, z.detach())`,
    `log_prob * advantage.detach()`, `kl(student, teacher.detach())`) and keep a path
    through the other operand; a whole term detached has none.

    ## Example
    ```python
    fake = netG(noise)
    pred_fake = netD(fake).detach()
    err_adv = bce(pred_fake, real_label)
    err_g = l1(fake, target) + 10.0 * err_adv
    err_g.backward()
    ```

    ## Use instead
    ```python
    fake = netG(noise)
    pred_fake = netD(fake)
    err_adv = bce(pred_fake, real_label)
    err_g = l1(fake, target) + 10.0 * err_adv
    err_g.backward()
    ```

    ## Fix safety
    The fix removes the `.detach()` when the detached value is read only on the way to
    the loss: the term's gradient comes back, and the layers it runs through (the
    discriminator) now get gradients in this step too, which a later `zero_grad()`
    usually clears. That changes what trains: unsafe. A cut by `.item()`, or a detached
    value also read elsewhere, is reported without a fix.
    """

    code = "GF408"
    calls = frozenset({"backward", "grad"})
    name = "detached-loss-term"
    synopsis = (
        "Finds a loss term whose path to the model was cut by `.detach()` or `.item()`, "
        "a constant that trains nothing, and removes the `.detach()` where it can."
    )
    message = (
        "This term of the backpropagated loss has no gradient: `.detach()`/`.data`/`.item()` "
        "cut its only path to the model, so it adds nothing to training; keep the graph"
    )
    fix_safety = FixSafety.UNSAFE
    fix_availability = FixAvailability.SOMETIMES

    VALID = [
        Valid(
            """
            import torch
            import torch.nn as nn
            import torch.nn.functional as F
            student, teacher = nn.Linear(4, 3), nn.Linear(4, 3)
            x, y = torch.randn(8, 4), torch.randint(0, 3, (8,))
            out = student(x)
            soft = teacher(x).detach()
            loss = F.cross_entropy(out, y) + 0.5 * F.mse_loss(out, soft)
            loss.backward()
            """
        ),
        Valid(
            """
            import torch
            import torch.nn as nn
            netG, netD = nn.Linear(4, 4), nn.Sequential(nn.Linear(4, 1), nn.Sigmoid())
            bce = nn.BCELoss()
            fake = netG(torch.randn(8, 4))
            err_d = bce(netD(fake.detach()), torch.zeros(8, 1))
            err_d.backward()
            z = torch.randn(8, 4, requires_grad=True)
            z_q = torch.randn(8, 4, requires_grad=True)
            vq = ((z_q - z.detach()) ** 2).mean() + 0.25 * ((z_q.detach() - z) ** 2).mean()
            vq.backward()
            """
        ),
        Valid(
            """
            import torch
            model = torch.nn.Linear(3, 1)
            x = torch.randn(5, 3)
            running = model(x).mean().detach()
            loss = (model(x) ** 2).mean()
            loss.backward()
            print(running + loss.item())
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            import torch.nn as nn
            netg = nn.Sequential(nn.Linear(6, 6), nn.Sigmoid())
            netd = nn.Sequential(nn.Linear(6, 1), nn.Sigmoid())
            l_con, l_bce = nn.L1Loss(), nn.BCELoss()
            x, gt = torch.randn(4, 6), torch.rand(4, 6)
            fake = netg(x)
            pred_fake = netd(fake).detach()  # the discriminator's verdict
            err_adv = l_bce(pred_fake.view(-1), torch.ones(4))
            err_g = l_con(fake, gt) + 10.0 * err_adv
            err_g.backward()
            """,
            """
            import torch
            import torch.nn as nn
            netg = nn.Sequential(nn.Linear(6, 6), nn.Sigmoid())
            netd = nn.Sequential(nn.Linear(6, 1), nn.Sigmoid())
            l_con, l_bce = nn.L1Loss(), nn.BCELoss()
            x, gt = torch.randn(4, 6), torch.rand(4, 6)
            fake = netg(x)
            pred_fake = netd(fake)  # the discriminator's verdict
            err_adv = l_bce(pred_fake.view(-1), torch.ones(4))
            err_g = l_con(fake, gt) + 10.0 * err_adv
            err_g.backward()
            """,
        ),
        Invalid(
            """
            import torch
            from torch import nn
            class Net(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.fc = nn.Linear(4, 2)
                def forward(self, x):
                    return self.fc(x)
            def step(model, x, y, opt, lam=0.01):
                opt.zero_grad()
                out = model(x)
                reg = out.abs().mean()  # keep the logits small
                loss = nn.functional.cross_entropy(out, y) + lam * reg.item()
                loss.backward()
                opt.step()
            net = Net()
            opt = torch.optim.SGD(net.parameters(), 0.1)
            step(net, torch.randn(8, 4), torch.randint(0, 2, (8,)), opt)
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
                self._check_loss(root, node)

    def _check_loss(self, root: ast.expr, call: ast.Call) -> None:
        detached: list[ast.expr] = []
        trains = False
        for term, at in self._terms(root, call, 0):
            cuts: list[ast.expr] = []
            if self._flows(term, at, 0, cuts):
                trains = True
            else:
                detached += cuts
        if not trains:
            return  # the whole loss has no gradient: backward raises (GF110 and the trace)
        for cut in sorted(set(detached), key=self.analysis.index):
            self.report(cut, fix=self._fix(cut))

    # -- the loss's additive terms -----------------------------------------------------------
    def _terms(self, expr: ast.expr, at: ast.AST, depth: int) -> list[tuple[ast.expr, ast.AST]]:
        """``a + w * b - c`` -> ``a``, ``b``, ``c`` (a constant weight keeps its term),
        following names bound to such sums."""
        if depth > _DEPTH:
            return [(expr, at)]
        if type(expr) is ast.BinOp:
            if type(expr.op) in (ast.Add, ast.Sub):
                return [
                    *self._terms(expr.left, at, depth + 1),
                    *self._terms(expr.right, at, depth + 1),
                ]
            if type(expr.op) in (ast.Mult, ast.Div):
                if _is_number(expr.right):
                    return self._terms(expr.left, at, depth + 1)
                if type(expr.op) is ast.Mult and _is_number(expr.left):
                    return self._terms(expr.right, at, depth + 1)
        if type(expr) is ast.Name:
            binding = self.analysis.reaching_binding(expr, at)
            if (
                binding is not None
                and binding.kind == "assign"
                and binding.value is not None
                and binding.unpack_index is None
                and not self.analysis.index_assignments(expr, at)
            ):
                return self._terms(binding.value, binding.node, depth + 1)
        return [(expr, at)]

    # -- the walk back from a term -------------------------------------------------------------
    def _flows(self, expr: ast.AST, at: ast.AST, depth: int, cuts: list[ast.expr]) -> bool:
        """``expr`` may carry a gradient (unknown: True); the ``.detach()``/``.item()``
        calls that cut a path which carried one go in ``cuts``."""
        if depth > _DEPTH:
            return True
        if isinstance(expr, ast.Constant):
            return False
        if isinstance(expr, ast.Name):
            return self._name_flows(expr, at, depth, cuts)
        if isinstance(expr, ast.Call):
            return self._call_flows(expr, at, depth, cuts)
        if isinstance(expr, ast.Subscript):
            return self._flows(expr.value, at, depth + 1, cuts)
        if isinstance(expr, ast.Attribute):
            if expr.attr in VIEW_ATTRIBUTES:
                return self._flows(expr.value, at, depth + 1, cuts)
            if expr.attr == "data" and self.analysis.is_tensor(expr.value, at):
                if self._flows(expr.value, at, depth + 1, []):
                    cuts.append(expr)
                return False
            return self.analysis.requires_grad(expr, at)
        if isinstance(expr, ast.Compare):
            return False
        parts = combined_values(expr)
        if parts is None:
            return self.analysis.requires_grad(expr, at)
        return any([self._flows(part, at, depth + 1, cuts) for part in parts])

    def _name_flows(self, name: ast.Name, at: ast.AST, depth: int, cuts: list[ast.expr]) -> bool:
        binding = self.analysis.reaching_binding(name, at)
        if (
            binding is None
            or binding.kind != "assign"
            or binding.value is None
            or binding.unpack_index is not None
        ):
            return self.analysis.requires_grad(name, at)
        flows = self._flows(binding.value, binding.node, depth + 1, cuts)
        if type(binding.value) is ast.List:
            for appended, call in self._appended(name.id, binding):
                flows = self._flows(appended, call, depth + 1, cuts) or flows
        for statement, value in self.analysis.index_assignments(name, at):
            flows = self._flows(value, statement, depth + 1, cuts) or flows
        return flows

    def _call_flows(self, call: ast.Call, at: ast.AST, depth: int, cuts: list[ast.expr]) -> bool:
        func = call.func
        method = type(func) is ast.Attribute and self.analysis.qualified_name(func) is None
        if method:
            assert isinstance(func, ast.Attribute)
            if func.attr in _DETACHING and not call.args and not call.keywords:
                if self._flows(func.value, at, depth + 1, []):
                    cuts.append(call)
                return False
            if func.attr in GRAD_CUTTING_METHODS:
                return False
        module_class = self.analysis.nn_module_class(func, at)
        if module_class is not None and _parameter_free(module_class):
            operands = argument_values(call)  # ``nn.BCELoss()(pred, label)``: its op
        elif module_class is not None or self.analysis.is_module(func, at):
            return True  # a layer, a container, a model: its parameters train
        elif self.analysis.local_function(func, at):
            returned = self.analysis.returned_values(call, at)
            if not returned:
                return self.analysis.requires_grad(call, at)
            return any([self._flows(value, ret, depth + 1, cuts) for value, ret in returned])
        elif method:
            assert isinstance(func, ast.Attribute)
            operands = [func.value, *argument_values(call)]
        else:
            name = self.analysis.call_name(call) or ""
            if name in FACTORIES:
                return self.analysis.leaf_reason(call, at) is not None
            if not name.startswith("torch.") or constructs_a_class(name):
                return self.analysis.requires_grad(call, at)
            operands = argument_values(call)
        return any([self._flows(arg, at, depth + 1, cuts) for arg in operands])

    def _appended(self, name: str, binding: Binding) -> list[tuple[ast.expr, ast.Call]]:
        """``xs = []`` then ``xs.append(v)`` in the same scope: each ``(v, call)``."""
        scope = self.analysis.scope_of(binding.node).node
        found = []
        for read in self.analysis.name_nodes_in(scope, name):
            owner = self.analysis.parent(read)
            if type(owner) is not ast.Attribute or owner.attr not in ("append", "extend"):
                continue
            call = self.analysis.parent(owner)
            if (
                type(call) is ast.Call
                and call.func is owner
                and len(call.args) == 1
                and self.analysis.reaching_binding(read, read) is binding
            ):
                found.append((call.args[0], call))
        return found

    # -- the fix ---------------------------------------------------------------------------------
    def _fix(self, cut: ast.expr) -> FixPlan | None:
        if not self._read_once(cut):
            return None
        if type(cut) is ast.Attribute:
            return self.plan_replace(cut, attribute_owner, "Drop `.data` so the term trains")
        func = cut.func  # type: ignore[attr-defined]
        if func.attr != "detach":
            return None
        return self.plan_replace(cut, method_receiver, "Remove `.detach()` so the term trains")

    def _read_once(self, cut: ast.expr) -> bool:
        """The detached value is read on the way to the loss only: the cut is inline, or
        it is the whole value of an assignment whose name is read once."""
        statement = self.analysis.parent(cut)
        if type(statement) is not ast.Assign:
            return type(statement) is not ast.NamedExpr
        if statement.value is not cut or len(statement.targets) != 1:
            return False
        target = statement.targets[0]
        if type(target) is not ast.Name:
            return False
        scope = self.analysis.scope_of(statement).node
        reads = [
            n
            for n in self.analysis.name_nodes_in(scope, target.id)
            if type(n.ctx) is ast.Load
            and self.analysis.reaching_binding(n, n) is not None
            and self.analysis.reaching_binding(n, n).node is statement  # type: ignore[union-attr]
        ]
        return len(reads) == 1


def _parameter_free(module_class: str) -> bool:
    return module_class.endswith("Loss") or (
        module_class in NN_NON_LAYERS and module_class not in _CONTAINERS
    )


def _is_number(expr: ast.expr) -> bool:
    """A weight: ``10.0``, ``-0.5``, ``LAMBDA`` (a name in capitals is a hyperparameter
    far more often than a tensor)."""
    return is_number_literal(expr) or (type(expr) is ast.Name and expr.id.isupper())
