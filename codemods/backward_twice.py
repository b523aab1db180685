"""GF401 backward-twice."""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator, Sequence

import libcst as cst

from gradfix.edits import Editor, cst_argument, with_argument, without_argument
from gradfix.rule import Edit, FixAvailability, FixPlan, FixSafety, Invalid, Rule, Valid
from gradfix.semantic import (
    SAVES_DIVISOR,
    SAVES_INPUTS,
    SAVES_OTHER_OPERANDS,
    SAVES_OUTPUT,
    TENSOR_OPS,
    argument,
    argument_value,
    argument_values,
    call_arguments,
    is_false,
    is_true,
    is_unpacked,
)
from gradfix.semantic.syntax import (
    is_backward_call,
    is_concatenated_string,
    iterates_at_least_once,
    source_children,
)
from gradfix.torch_facts import (
    FACTORY_FUNCTIONS,
    NON_GRAPH_CALLS,
    NON_TENSOR_METHODS,
    OP_NAMESPACES,
    OPS,
    RANDOM_OPS,
    functional_of_module,
    is_inplace_method,
)

#: Backward entry points -> (position of ``retain_graph``, position of ``create_graph``).
GRAD_FUNCTIONS = {"torch.autograd.grad": (3, 4), "torch.autograd.backward": (2, 3)}
BACKWARD_METHOD_POSITIONS = (1, 2)
#: ``torch.nn.functional`` ops outside analysis' ``SAVES_*`` tables that save their inputs.
SAVING_FUNCTIONAL = frozenset(
    "linear bilinear conv1d conv2d conv3d cross_entropy nll_loss binary_cross_entropy "
    "binary_cross_entropy_with_logits kl_div".split()
)
#: Ops that save a tensor whenever they are recorded (some operand requires grad).
SAVING_OPS = SAVES_INPUTS | SAVES_OUTPUT | SAVES_OTHER_OPERANDS | SAVES_DIVISOR
#: Methods whose result is outside the graph.
GRAD_CUTTING_OPS = frozenset("detach detach_ item tolist numpy argmax argmin".split())
_MAX_DEPTH = 12

#: Expressions of a graph that save tensors: id -> (expression, node it is evaluated at).
_SavingNodes = dict[int, tuple[ast.expr, ast.AST]]
#: Recurrent layers whose hidden state (second output) is one tensor (``nn.LSTM``'s is a
#: tuple ``(h, c)``).
_TENSOR_STATE_LAYERS = frozenset({"torch.nn.RNN", "torch.nn.GRU"})
#: Loops: a backward call in one reruns with each iteration.
_LOOPS = (ast.For, ast.AsyncFor, ast.While)


#: Builtins a forward may call that change nothing (``len(x)``, ``int(n)``).
_PURE_BUILTINS = NON_GRAPH_CALLS - {"print"}
#: Nodes whose code runs apart from the statement holding them.
_DEFERRED = (
    ast.FunctionDef,
    ast.AsyncFunctionDef,
    ast.ClassDef,
    ast.Lambda,
    ast.ListComp,
    ast.GeneratorExp,
)


#: ``backward(retain_variables=True)``: the argument's name before torch 1.5
RETAIN_VARIABLES_MESSAGE = (
    "`retain_variables` was renamed `retain_graph` in torch 1.5: this call raises "
    "TypeError: backward() got an unexpected keyword argument 'retain_variables'"
)


class BackwardTwice(Rule):
    """
    ## What it does
    Finds two `backward()` / `torch.autograd.grad()` calls through the same autograd graph
    where the first one does not pass `retain_graph=True`, and adds `retain_graph=True` to
    the first call.

    ## Why is this bad?
    `backward()` frees the tensors the graph saved for backward (the inputs of `x * w`,
    the output of `exp`...) as it goes. A second backward pass through any of those ops
    raises "Trying to backward through the graph a second time (or directly access saved
    tensors after they have already been freed)". It happens with the same root twice, with
    two losses that share an intermediate result, and with `loss.backward()` inside a loop
    when `loss` is computed once before the loop.

    ## Example
    ```python
    h = torch.tanh(x @ w)
    loss1 = h.sum()
    loss2 = (h ** 2).sum()
    loss1.backward()
    loss2.backward()  # RuntimeError: Trying to backward through the graph a second time
    ```

    ## Use instead
    ```python
    loss1.backward(retain_graph=True)
    loss2.backward()
    ```
    Gradients of the two calls accumulate in `.grad`, as the original code asked for.

    ## Fix safety
    Safe: `retain_graph=True` changes no forward result and only keeps the saved tensors
    alive until the last call. No fix when parameters may be updated between the calls
    (an optimizer `step()`, an in-place op): the retained graph would then fail its version
    check, and the code needs a new forward pass instead.

    A loop that calls `backward()` on a loss computed once before the loop: that graph is
    stale after the first update, and the forward pass belongs inside the loop. The fix
    moves its chain of assignments to the top of the loop's body, keeping their comments.
    Unsafe: from the second iteration on the forward sees the updated parameters, which
    the original (raising there) never computed; the first iteration is unchanged. Offered
    only when the moved lines evaluate torch ops alone (no `print`, no function of the
    project, no in-place op, no random draw: drawn again in each iteration, it would change
    every later draw), leave no other value that carries the graph behind, and bind no name
    read after a loop that may not run (`range(n)`). On a run's evidence, `gradfix trace`
    moves the chain without these conditions and writes it once the rerun proves it.
    Two losses of one step sharing a value that a first optimizer step separates (a GAN:
    `fake = netG(noise)` feeds the discriminator's loss, then the generator's): the fix
    passes `fake.detach()` where the first loss reads it, when the gradients that loss
    gives the modules that made `fake` are reset (`netG.zero_grad()`, or the `zero_grad()`
    of an optimizer over `netG.parameters()`) before any optimizer that may hold them
    steps. Unsafe: the first backward no longer computes those gradients, which the
    program throws away unread (the verifier's run shows them discarded).

    Only graphs with an op shown to save tensors are reported (`a + b` and `x.sum()` save
    nothing and can be back-propagated twice).
    """

    code = "GF401"
    # every check starts from a backward call (a run's evidence aside)
    needs = frozenset({"backward", *(name.rpartition(".")[2] for name in GRAD_FUNCTIONS)})
    name = "backward-twice"
    synopsis = (
        "Finds a second backward pass through a graph the first one freed and adds "
        "`retain_graph=True` to the first call."
    )
    message = "Second backward pass through a graph freed by the first; pass `retain_graph=True`"
    fix_safety = FixSafety.SAFE
    fix_safeties = (FixSafety.SAFE, FixSafety.UNSAFE)
    fix_availability = FixAvailability.SOMETIMES
    fix_drops_leaves = True  # a leaf a run showed untrained is made without requires_grad

    VALID = [
        Valid(
            """
            import torch
            a = torch.tensor([3.0], requires_grad=True)
            b = a * a
            b.backward(retain_graph=True)
            b.backward()
            """
        ),
        Valid(
            """
            import torch
            w = torch.randn(3, requires_grad=True)
            opt = torch.optim.SGD([w], lr=0.1)
            for step in range(3):
                loss = (w * w).sum()
                opt.zero_grad()
                loss.backward()
                opt.step()
            """
        ),
        Valid(
            """
            import torch
            a = torch.tensor([3.0], requires_grad=True)
            b = a * a * a
            db = torch.autograd.grad(b, a, create_graph=True)[0]
            d2b = torch.autograd.grad(db, a)[0]
            """
        ),
        Valid(
            """
            import torch
            import torch.nn.functional as F
            model = torch.nn.Linear(4, 2)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for step in range(3):  # adversarial training (FGSM)
                x = torch.randn(8, 4, requires_grad=True)
                y = torch.randint(0, 2, (8,))
                loss = F.cross_entropy(model(x), y)
                (g,) = torch.autograd.grad(loss, x)  # plain tensors: no graph
                adv_loss = F.cross_entropy(model(x + 0.1 * g.sign()), y)
                opt.zero_grad()
                adv_loss.backward()
                opt.step()
            """
        ),
        Valid(
            """
            import torch
            w = torch.randn(3, requires_grad=True)
            loss1 = (w * 2).sum()
            loss2 = w.exp().sum()
            loss1.backward()
            loss2.backward()
            """
        ),
        Valid(
            """
            import torch
            w = torch.randn(3, requires_grad=True)
            h = w + 1
            (h.sum()).backward()
            h.mean().backward()
            """
        ),
        Valid(
            """
            import torch
            w = torch.randn(3, requires_grad=True)
            loss = (w * w).sum()
            loss.backward()
            loss = (w * w).sum()
            loss.backward()
            """
        ),
        Valid(
            """
            import torch
            from torch import nn
            cell = nn.GRUCell(3, 4)
            opt = torch.optim.SGD(cell.parameters(), lr=0.1)
            h = torch.zeros(2, 4)
            for x in torch.rand(5, 2, 3):
                h = cell(x, h)
                loss = h.pow(2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
                h = h.detach()  # truncated backpropagation through time
            """
        ),
        Valid(
            """
            import torch
            from torch import nn
            cell = nn.GRUCell(3, 4)
            for batch in torch.rand(2, 5, 2, 3):
                h = torch.zeros(2, 4)
                for x in batch:
                    h = cell(x, h)  # carried through time, one backward per sequence
                h.sum().backward()
            """
        ),
        Valid(
            """
            import torch
            w = torch.randn(3, requires_grad=True)
            with torch.no_grad():
                target = torch.tanh(w * 2)
            for step in range(3):
                loss = ((w - target) ** 2).sum()
                loss.backward()
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            a = torch.tensor([3.0], requires_grad=True)
            b = a * a
            b.backward()
            b.backward()
            """,
            """
            import torch
            a = torch.tensor([3.0], requires_grad=True)
            b = a * a
            b.backward(retain_graph=True)
            b.backward()
            """,
        ),
        Invalid(
            """
            import torch as th

            def two_losses(x, w):
                h = th.tanh(x @ w)
                loss1 = h.sum()
                loss2 = (h ** 2).mean()
                th.autograd.grad(loss1, w)
                loss2.backward(inputs=[w])
            """,
            """
            import torch as th

            def two_losses(x, w):
                h = th.tanh(x @ w)
                loss1 = h.sum()
                loss2 = (h ** 2).mean()
                th.autograd.grad(loss1, w, retain_graph=True)
                loss2.backward(inputs=[w])
            """,
        ),
        Invalid(
            """
            import torch
            w = torch.randn(3, requires_grad=True)
            loss = (w ** 2).sum()
            for epoch in range(3):
                loss.backward()
            """,
            """
            import torch
            w = torch.randn(3, requires_grad=True)
            for epoch in range(3):
                loss = (w ** 2).sum()
                loss.backward()
            """,
        ),
        Invalid(
            """
            import torch
            w = torch.randn(3, requires_grad=True)
            opt = torch.optim.SGD([w], lr=0.1)
            # forward
            h = torch.tanh(w)  # once
            loss = h.pow(2).sum()

            for epoch in range(3):
                opt.zero_grad()
                loss.backward()
                opt.step()
            print(loss.item())
            """,
            """
            import torch
            w = torch.randn(3, requires_grad=True)
            opt = torch.optim.SGD([w], lr=0.1)
            for epoch in range(3):
                # forward
                h = torch.tanh(w)  # once
                loss = h.pow(2).sum()

                opt.zero_grad()
                loss.backward()
                opt.step()
            print(loss.item())
            """,
        ),
        Invalid(
            """
            import torch
            w = torch.randn(3, requires_grad=True)
            noisy = (w + 0.1 * torch.randn(3)).exp()  # drawn once: moved, drawn each step
            for epoch in range(3):
                noisy.sum().backward()
            """,
            report_only=True,
        ),
        Invalid(
            """
            import torch as th


            class Tagger(th.nn.Module):
                def __init__(self):
                    super().__init__()
                    self.lstm = th.nn.LSTM(3, 4, batch_first=True)

                def fit(self, chunks, opt):
                    h, c = th.zeros(1, 2, 4), th.zeros(1, 2, 4)
                    for chunk in chunks:
                        out, (h, c) = self.lstm(
                            chunk, (h, c)  # state from the previous chunk
                        )
                        opt.zero_grad()
                        out.pow(2).mean().backward()
                        opt.step()
            """,
            """
            import torch as th


            class Tagger(th.nn.Module):
                def __init__(self):
                    super().__init__()
                    self.lstm = th.nn.LSTM(3, 4, batch_first=True)

                def fit(self, chunks, opt):
                    h, c = th.zeros(1, 2, 4), th.zeros(1, 2, 4)
                    for chunk in chunks:
                        out, (h, c) = self.lstm(
                            chunk, (h, c)  # state from the previous chunk
                        )
                        h = h.detach()
                        c = c.detach()
                        opt.zero_grad()
                        out.pow(2).mean().backward()
                        opt.step()
            """,
        ),
        Invalid(
            """
            import torch
            from models import Seq2Seq
            model = Seq2Seq()
            opt = torch.optim.Adam(model.parameters())
            hidden = None
            for src, tgt in zip(torch.rand(3, 4, 5), torch.rand(3, 4, 5)):
                pred, hidden = model(src, hidden)  # a tensor or a tuple: no fix
                loss = torch.nn.functional.mse_loss(pred, tgt)
                opt.zero_grad()
                loss.backward()
                opt.step()
            """,
            report_only=True,
        ),
        Invalid(
            """
            import torch
            t = torch.eye(2, requires_grad=True)
            y = t @ torch.ones(2)
            for _ in range(2):
                out = (t * y).sum()
                out.backward()
            """,
            """
            import torch
            t = torch.eye(2, requires_grad=True)
            for _ in range(2):
                y = t @ torch.ones(2)
                out = (t * y).sum()
                out.backward()
            """,
        ),
        Invalid(
            """
            import torch
            from torch import nn
            encoder = nn.Linear(3, 4)
            critic = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 1))
            critic_opt = torch.optim.SGD(critic.parameters(), lr=0.1)
            for x in torch.rand(2, 5, 3):
                code = encoder(x)
                critic_loss = critic(code).mean()
                critic_loss.backward()
                critic_opt.step()
                encoder.zero_grad()
                (-critic(code).mean()).backward()
            """,
            """
            import torch
            from torch import nn
            encoder = nn.Linear(3, 4)
            critic = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 1))
            critic_opt = torch.optim.SGD(critic.parameters(), lr=0.1)
            for x in torch.rand(2, 5, 3):
                code = encoder(x)
                critic_loss = critic(code.detach()).mean()
                critic_loss.backward()
                critic_opt.step()
                encoder.zero_grad()
                (-critic(code).mean()).backward()
            """,
        ),
        Invalid(
            """
            import torch
            from torch import nn
            netG, netD = nn.Linear(2, 4), nn.Linear(4, 1)
            optD = torch.optim.Adam(netD.parameters())
            optG = torch.optim.Adam(netG.parameters())
            for noise in torch.randn(3, 8, 2):
                fake = netG(noise)
                errD = netD(fake).mean()  # the generator's gradients from it are stepped
                errD.backward()
                optD.step()
                optG.step()
                optG.zero_grad()
                errG = -netD(fake).mean()
                errG.backward()
                optG.step()
            """,
            report_only=True,
        ),
    ]

    def visit_Call(self, node: ast.Call) -> None:
        if self._untrained_leaf_at_run(node):
            return
        if not self._runs_backward:
            return  # both checks start from a backward call
        self._check_retained_state(node)
        root = self._first_pass_root(node)
        if root is None or self.analysis.in_no_grad(node) or not self.analysis.imports_torch():
            return
        saving = self._saving_nodes(root, node)
        if not any(self.analysis.is_tensor(expr, at) for expr, at in saving.values()):
            return  # no op of the graph is shown to be a torch op: another library's backward
        stale = self._stale_forward(node, saving)
        if stale is not None:  # the forward belongs in the loop
            self.report(
                stale, self._stale_message(node), fix=self._moved_into_loop(stale, node, saving)
            )
            return
        for later in self._later_backward_calls(node):
            later_root = self._root(later)
            if later_root is None:
                continue
            shared = saving.keys() & self._saving_nodes(later_root, later).keys()
            if not shared:
                continue
            fix = self._fix(node, later)
            own_part = saving.keys() - shared  # the first loss trains a graph of its own
            entry = None
            if fix is None and own_part:
                entry = self._shared_entry(root, node, saving, shared)
            if argument(node, "retain_variables", None) is not None:  # torch < 1.5 code
                self.report(node, RETAIN_VARIABLES_MESSAGE, fix=self._renamed_retain(node))
            elif entry is None:
                self.report(node, fix=fix)
            else:
                name, statement = entry
                fix = self._detached_entry(name, statement, node, later)
                self.report(statement, self._shared_message(name, later), fix=fix)
            return

    def _untrained_leaf_at_run(self, node: ast.Call) -> bool:
        """A run saw the leaf this call creates with ``requires_grad=True`` left unchanged by
        the training step while a value made from it once (labels, data) carried its graph
        into each step: create it, and the others the run saw so, without
        ``requires_grad`` (one fix: the graph is carried while any of them requires grad).
        Only on a run's evidence (``gradfix trace``), which then proves the fix by running
        again."""
        calls, fix = self._untrained_leaves
        if not any(call is node for call in calls):
            return False
        message = "created with `requires_grad=True` but never trained: its graph is carried"
        self.report(node, message, fix=fix)
        return True

    @functools.cached_property
    def _untrained_leaves(self) -> tuple[list[ast.Call], FixPlan | None]:
        if not self.runtime:
            return [], None
        calls = [
            call
            for call in self.analysis.by_type.get(ast.Call, [])
            if self.proven_at_run(call.lineno, "untrained-leaf")
            and is_true(argument(call, "requires_grad", None))  # type: ignore[arg-type]
        ]
        if not calls:
            return [], None

        def build(editor: Editor) -> list[Edit] | None:
            edits = []
            for call in calls:
                node = editor.node(call)
                if not isinstance(node, cst.Call):
                    return None
                edits.append(Edit(node, without_argument(node, "requires_grad")))
            return edits

        lines = ", ".join(str(call.lineno) for call in calls)
        return calls, self.plan(build, f"Create the leaves at line {lines} without `requires_grad`")  # type: ignore[return-value]

    # -- state carried across iterations ------------------------------------------------
    def visit_Assign(self, node: ast.Assign) -> None:
        if not self._check_carried_at_run(node):  # a run's evidence first: its fix is rerun
            self._check_carried_state(node)

    def _check_carried_state(self, node: ast.Assign) -> None:
        """``out, h = rnn(x, h)`` in a loop that calls ``backward()`` each iteration: ``h``
        carries the previous iteration's graph, freed by its backward, into the next one."""
        if not self._runs_backward or not self.analysis.imports_torch():
            return
        if self.analysis.in_no_grad(node):
            return
        loop = self._innermost_loop(node)
        if loop is None or not self._backward_after(node, loop):
            return
        carried = self._carried_names(node, loop)
        if not carried:
            return
        if not (self._makes_graph(node.value, node) or self._feeds_backward(node, loop)):
            return
        names = ", ".join(f"`{name.id}`" for name in carried)
        verb = "carries" if len(carried) == 1 else "carry"
        message = (
            f"{names} {verb} the previous iteration's graph into the next backward "
            '("backward through the graph a second time"); detach it at the iteration '
            "boundary"
        )
        self.report(node, message, fix=self._detach_after(node, carried))

    @functools.cached_property
    def _runs_backward(self) -> bool:
        """Some call of the file runs a backward pass: most files (models) have none, and
        every check of this rule needs one."""
        calls = self.analysis.calls_that_may_be([*GRAD_FUNCTIONS, "torch.Tensor.backward"])
        return any(self._positions(call) is not None for call in calls)

    @functools.cached_property
    def _bodies(self) -> dict[int, _CallCollector]:
        return {}  # id of a loop's body -> what it calls (the file's tree outlives the rule)

    def _collected(self, body: list[ast.stmt]) -> _CallCollector:
        """The calls and augmented assignments of ``body`` (a loop's), collected once per
        body: every assignment of a loop asks for them."""
        collector = self._bodies.get(id(body))
        if collector is None:
            collector = self._bodies[id(body)] = _CallCollector()
            for statement in body:
                collector.visit(statement)
        return collector

    def _innermost_loop(self, node: ast.AST) -> ast.For | ast.AsyncFor | ast.While | None:
        scope = self.analysis.scope_of(node).node
        for ancestor in self.analysis.ancestors(node):
            if ancestor is scope:
                return None
            if isinstance(ancestor, _LOOPS):
                return ancestor
        return None

    def _backward_after(self, node: ast.stmt, loop: ast.AST) -> bool:
        """A backward call runs in ``loop``'s body after ``node``."""
        position = self.analysis.index(node)
        collector = self._collected(loop.body)  # type: ignore[attr-defined]
        return any(
            self.analysis.index(call) > position and self._positions(call) is not None
            for call in collector.calls
        )

    def _carried_names(self, node: ast.Assign, loop: ast.AST) -> list[ast.Name]:
        """Targets of ``node`` its value reads, bound before the loop and nowhere else in
        the loop's body (a ``h = h.detach()`` or a reset per iteration ends the chain)."""
        read = {n.id for n in ast.walk(node.value) if type(n) is ast.Name}
        body = loop.body  # type: ignore[attr-defined]
        carried = []
        for target in _target_names(node.targets):
            if target.id not in read or _moved_itself(node.value, target.id):
                continue
            if self.analysis.is_module(target, node):
                continue  # ``model = model.to(device)``: a module, not a state
            bindings = self.analysis.bindings(target)
            inside = [b for b in bindings if self.analysis.contains(loop, b.node)]
            before = [
                b for b in bindings if self.analysis.index(b.node) < self.analysis.index(loop)
            ]
            if (
                before
                and all(b.node is node for b in inside)
                and not self._detached_in(target.id, body)
            ):
                carried.append(target)
        return carried

    def _detached_in(self, name: str, body: list[ast.stmt]) -> bool:
        """``name.detach_()`` (or any in-place method on it) is called in ``body``."""
        collector = self._collected(body)
        return any(
            type(call.func) is ast.Attribute
            and type(call.func.value) is ast.Name
            and call.func.value.id == name
            and call.func.attr.endswith("_")
            for call in collector.calls
        )

    def _makes_graph(self, value: ast.expr, at: ast.AST) -> bool:
        if self.analysis.requires_grad(value, at):
            return True
        return type(value) is ast.Call and self.analysis.is_module(value.func, at)

    def _feeds_backward(self, node: ast.Assign, loop: ast.AST) -> bool:
        """A name ``node`` binds flows into the root of a backward call of ``loop``'s body
        (evidence from use: ``pred`` of ``loss = mse(pred, y); loss.backward()``)."""
        collector = self._collected(loop.body)  # type: ignore[attr-defined]
        pending = [
            (root, call)
            for call in collector.calls
            if self.analysis.index(call) > self.analysis.index(node)
            for root in [self._root(call)]
            if root is not None
        ]
        seen: set[int] = set()
        while pending:
            expr, at = pending.pop()
            for name in (n for n in ast.walk(expr) if type(n) is ast.Name):
                binding = self.analysis.reaching_binding(name, at)
                if binding is None or id(binding.node) in seen:
                    continue
                seen.add(id(binding.node))
                if binding.node is node:
                    return True
                if binding.value is not None and self.analysis.contains(loop, binding.node):
                    pending.append((binding.value, binding.node))
        return False

    def _detach_after(self, node: ast.Assign, carried: list[ast.Name]) -> FixPlan | None:
        """``h = h.detach()`` right after ``node``, when each ``h`` is shown a tensor."""
        if not all(self._carries_tensor(n, node) for n in carried):
            return None
        names = ", ".join(f"`{n.id}`" for n in carried)
        return self._detach_plan(node, [n.id for n in carried], f"Detach {names} after each step")

    def _detach_plan(self, node: ast.Assign, names: list[str], description: str) -> FixPlan:
        """``h = h.detach()`` for each name, right after ``node``'s line (not after a
        compound statement ``node`` sits in on one line: no fix then)."""
        lines = [f"{name} = {name}.detach()\n" for name in names]

        def build(editor: Editor) -> list[Edit] | None:
            line = editor.statement(node)
            if not isinstance(line, cst.SimpleStatementLine):
                return None
            added = [cst.parse_statement(text) for text in lines]
            return [Edit(line, cst.FlattenSentinel([line, *added]))]

        return self.plan(build, description)

    def _carries_tensor(self, name: ast.Name, node: ast.Assign) -> bool:
        """``name`` is a tensor after ``node``: shown there, or its value before the loop
        is one (fed back into the same argument, it keeps its type)."""
        if self.analysis.is_tensor(name, node) or self._recurrent_state(name, node):
            return True
        starts = [
            b
            for b in self.analysis.bindings(name)
            if self.analysis.index(b.node) < self.analysis.index(node)
        ]
        return bool(starts) and all(
            b.kind == "assign"
            and b.value is not None
            and b.unpack_index is None
            and self.analysis.is_tensor(b.value, b.node)
            for b in starts
        )

    def _recurrent_state(self, name: ast.Name, node: ast.Assign) -> bool:
        """``out, h = rnn(x, h)``: ``h`` is the hidden state an ``nn.RNN`` / ``nn.GRU``
        returns (a tensor; ``nn.LSTM``'s is a tuple), directly or through the ``forward``
        of a module class of this file that returns it at that position."""
        target = node.targets[0]
        if type(target) is not ast.Tuple or type(node.value) is not ast.Call:
            return False
        index = next((i for i, e in enumerate(target.elts) if e is name), None)
        if index != 1:
            return False
        func = node.value.func
        if self._is_tensor_state_layer(func, node):
            return True
        forward = self._module_forward(func, node)
        if forward is None:
            return False
        returns = [r for r in ast.walk(forward) if type(r) is ast.Return]
        return bool(returns) and all(self._returns_layer_state(r) for r in returns)

    def _is_tensor_state_layer(self, func: ast.expr, at: ast.AST) -> bool:
        """``func`` holds an ``nn.RNN`` or ``nn.GRU`` made in this file."""
        values: list[tuple[ast.expr, ast.AST]] = []
        if type(func) is ast.Name:
            binding = self.analysis.reaching_binding(func, at)
            if binding is not None and binding.kind == "assign" and binding.value is not None:
                values = [(binding.value, binding.node)]
        elif type(func) is ast.Attribute:
            values = [(v, b.node) for v, b in self.analysis.self_attribute_values(func, at)]
        return bool(values) and all(
            type(v) is ast.Call and self.analysis.call_name(v) in _TENSOR_STATE_LAYERS
            for v, _ in values
        )

    def _module_forward(self, func: ast.expr, at: ast.AST) -> ast.FunctionDef | None:
        """The ``forward`` of the module class of this file ``func`` is an instance of."""
        cls = self._instance_class(func, at)
        if cls is None:
            return None
        return next(
            (f for f in cls.body if type(f) is ast.FunctionDef and f.name == "forward"), None
        )

    def _instance_class(self, func: ast.expr, at: ast.AST) -> ast.ClassDef | None:
        """The class of this file ``func`` (a name bound to ``Class(...)``) instantiates."""
        if type(func) is not ast.Name:
            return None
        binding = self.analysis.reaching_binding(func, at)
        if binding is None or type(binding.value) is not ast.Call:
            return None
        constructor = binding.value.func
        classes = self.analysis.bindings(constructor) if type(constructor) is ast.Name else []
        if len(classes) != 1 or type(classes[0].node) is not ast.ClassDef:
            return None
        return classes[0].node

    # -- retain_graph=True hiding state carried across iterations ---------------------------
    def _check_retained_state(self, call: ast.Call) -> None:
        """``loss.backward(retain_graph=True)``, the loop's only backward, through a model
        of this file that keeps tensors on ``self`` from call to call (``self.M = self.M +
        ...``): each step backpropagates into every earlier one."""
        positions = self._positions(call)
        if positions is None or not is_true(argument(call, "retain_graph", positions[0])):
            return
        loop = self._innermost_loop(call)
        root = self._root(call)
        if loop is None or root is None or self.analysis.in_no_grad(call):
            return
        collector = self._collected(loop.body)
        if sum(self._positions(c) is not None for c in collector.calls) != 1:
            return
        state = self._carried_module_state(root, call, loop)
        if state is not None:
            self.report(call, self._retained_state_message(state))

    def _carried_module_state(self, root: ast.expr, at: ast.AST, loop: ast.AST) -> str | None:
        """``self.<attr>`` a model called in ``root``'s graph rebinds from itself."""
        pending: list[tuple[ast.expr, ast.AST]] = [(root, at)]
        seen: set[int] = set()
        while pending:
            expr, where = pending.pop()
            for node in ast.walk(expr):
                if type(node) is ast.Call:
                    cls = self._instance_class(node.func, where)
                    attr = None if cls is None else _self_accumulated(cls)
                    if attr is not None:
                        return attr
                if type(node) is not ast.Name:
                    continue
                binding = self.analysis.reaching_binding(node, where)
                if binding is None or binding.value is None or id(binding.node) in seen:
                    continue
                seen.add(id(binding.node))
                if self.analysis.contains(loop, binding.node):
                    pending.append((binding.value, binding.node))
        return None

    def _retained_state_message(self, attr: str) -> str:
        return (
            f"`retain_graph=True` on the loop's only backward keeps `self.{attr}` (state the "
            "model carries from step to step) attached to every earlier step: each backward "
            f"runs into them; detach `self.{attr}` at the step boundary and drop `retain_graph`"
        )

    def _returns_layer_state(self, ret: ast.Return) -> bool:
        """``return out, h`` where ``h`` is the state of ``self.rnn(x, h)`` (an RNN/GRU)."""
        value = ret.value
        if type(value) is not ast.Tuple or len(value.elts) != 2:
            return False
        state = value.elts[1]
        if type(state) is not ast.Name:
            return False
        binding = self.analysis.reaching_binding(state, ret)
        if binding is None or binding.unpack_index != 1 or type(binding.value) is not ast.Call:
            return False
        return self._is_tensor_state_layer(binding.value.func, binding.node)

    def _check_carried_at_run(self, node: ast.Assign) -> bool:
        """A run saw the value this statement binds carry a freed graph into the next
        iteration (``out, h = rnn(x, h)``): detach the state it passes back in. Only on a
        run's evidence (``gradfix trace``), which then proves the fix by running again."""
        if not self.proven_at_run(node.lineno, "backward-twice"):
            return False
        state = [name for name in _bound(node.targets) if name in _read(node.value)]
        if not state or self._innermost_loop(node) is None:
            return False
        self.report(node, fix=self._detach_fix(node, state))
        return True

    def _detach_fix(self, node: ast.Assign, state: list[str]) -> FixPlan:
        # offered only on a run's evidence, and written only once a run proved it
        names = ", ".join(f"`{name}`" for name in state)
        return self._detach_plan(node, state, f"Detach {names} where the step ends")

    # -- which calls run a backward pass -------------------------------------------------
    def _positions(self, call: ast.Call) -> tuple[int, int] | None:
        name = self.analysis.call_name(call)
        if name in GRAD_FUNCTIONS:
            return GRAD_FUNCTIONS[name]
        if name is None and is_backward_call(call):
            return BACKWARD_METHOD_POSITIONS
        return None

    def _root(self, call: ast.Call) -> ast.expr | None:
        """The tensor a backward call differentiates (``loss`` of ``loss.backward()``)."""
        if self._positions(call) is None:
            return None
        if type(call.func) is ast.Attribute and self.analysis.call_name(call) is None:
            return call.func.value
        return argument(call, "outputs", 0) or argument(call, "tensors", 0)

    def _first_pass_root(self, call: ast.Call) -> ast.expr | None:
        """The root of ``call`` when the call frees the graph it runs through."""
        positions = self._positions(call)
        if positions is None or any(is_unpacked(arg) for arg in call_arguments(call)):
            return None
        retain = argument(call, "retain_graph", positions[0])
        if retain is not None and not is_false(retain):
            return None
        create = argument(call, "create_graph", positions[1])
        if create is not None and not (is_false(create) or retain is not None):
            return None  # create_graph=True retains the graph too
        return self._root(call)

    # -- what the graph saves ------------------------------------------------------------
    def _saving_nodes(self, expr: ast.expr, at: ast.AST) -> _SavingNodes:
        """The expressions of ``expr``'s graph (following names to their reaching bindings)
        that record an op saving tensors for backward, by id.

        The root of a backward call requires grad (or the first call fails anyway), so an
        op whose only non-constant operand is on the root's path is recorded too.
        """
        found: _SavingNodes = {}
        self._collect_saving(expr, at, True, found, set(), 0)
        return found

    def _collect_saving(
        self,
        expr: ast.expr,
        at: ast.AST,
        recorded: bool,
        found: _SavingNodes,
        seen: set[int],
        depth: int,
    ) -> None:
        if depth > _MAX_DEPTH:
            return
        if type(expr) is ast.Name:
            binding = self.analysis.reaching_binding(expr, at)
            if binding is None or binding.kind != "assign" or binding.value is None:
                return
            if id(binding.node) in seen or self.analysis.in_no_grad(binding.node):
                return
            seen.add(id(binding.node))
            self._collect_saving(binding.value, binding.node, recorded, found, seen, depth + 1)
            return
        if type(expr) is ast.Call and self._gradients_without_graph(expr):
            return  # ``autograd.grad`` without create_graph: plain tensors, no graph
        op = self._tensor_op(expr, at)
        if op is None:
            if self._opaque_call_saves(expr, at, recorded):
                found[id(expr)] = (expr, at)
            keeps_path = type(expr) is ast.Subscript or type(expr) is ast.Attribute
            for operand in _operands(expr):
                self._collect_saving(operand, at, recorded and keeps_path, found, seen, depth + 1)
            return
        name, operands = op
        if name in GRAD_CUTTING_OPS:
            return
        recorded = recorded or self.analysis.requires_grad(expr, at)
        if recorded and name in SAVING_OPS:
            found[id(expr)] = (expr, at)
        variables = [o for o in operands if not _is_constant(o, self.context.source)]
        for operand in operands:
            on_path = recorded and len(variables) == 1 and operand is variables[0]
            self._collect_saving(operand, at, on_path, found, seen, depth + 1)

    def _gradients_without_graph(self, call: ast.Call) -> bool:
        """``torch.autograd.grad(loss, x)`` without ``create_graph=True``: the gradients
        it returns carry no graph (``x + eps * g.sign()`` of an adversarial step does not
        reach ``loss``'s)."""
        if self.analysis.call_name(call) != "torch.autograd.grad":
            return False
        return not is_true(argument(call, "create_graph", GRAD_FUNCTIONS["torch.autograd.grad"][1]))

    def _tensor_op(self, expr: ast.expr, at: ast.AST) -> tuple[str, list[ast.expr]] | None:
        """The analysis' op of ``expr``; also a known tensor method on an unproven receiver."""
        op = self.analysis.tensor_op(expr, at)
        if op is not None or type(expr) is not ast.Call:
            return op
        func = expr.func
        if type(func) is ast.Attribute and self.analysis.qualified_name(func) is None:
            method = func.attr
            if method in TENSOR_OPS or method in GRAD_CUTTING_OPS:
                return method, [func.value, *_argument_values(expr)]
        return None

    def _opaque_call_saves(self, expr: ast.expr, at: ast.AST, recorded: bool) -> bool:
        """``expr`` calls an ``nn`` layer or a ``torch.nn.functional`` op that saves tensors."""
        if type(expr) is not ast.Call:
            return False
        if self.analysis.is_nn_layer(expr.func, at) or self.analysis.is_module(expr.func, at):
            return True  # a layer, a model: its layers save their inputs
        name = self.analysis.call_name(expr) or ""
        short = name.rpartition(".")[2]
        if not name.startswith("torch.nn.functional.") or "." in name[20:]:
            return False
        saves = short in SAVING_FUNCTIONAL or short.endswith("_loss")
        return saves and (recorded or self.analysis.requires_grad(expr, at))

    def _shared_entry(
        self, root: ast.expr, call: ast.Call, saving: _SavingNodes, shared: set[int]
    ) -> tuple[ast.Name, ast.stmt] | None:
        """Where the first graph reads the name bound to the shared part (``fake`` of
        ``netD(fake)`` when ``fake = netG(z)`` feeds both losses): a remedy goes there."""
        shared_statements = {id(saving[key][1]) for key in shared}
        pending: list[tuple[ast.expr, ast.AST]] = [(root, call)]
        seen: set[int] = set()
        while pending:
            expr, at = pending.pop()
            for name in (n for n in ast.walk(expr) if type(n) is ast.Name):
                binding = self.analysis.reaching_binding(name, at)
                if binding is None or binding.value is None or id(binding.node) in seen:
                    continue
                seen.add(id(binding.node))
                if id(binding.node) in shared_statements and name is not root:
                    statement = self.analysis.enclosing_statement(name)
                    return None if statement is None else (name, statement)
                pending.append((binding.value, binding.node))
        return None

    def _detached_entry(
        self, name: ast.Name, statement: ast.stmt, call: ast.Call, later: ast.Call
    ) -> FixPlan | None:
        """``netD(fake.detach())`` where the first loss reads the shared value, when what
        made it (``fake = netG(noise)``: modules called on values without a graph) has its
        gradients reset before the later backward (``netG.zero_grad()``, or the
        ``zero_grad()`` of an optimizer over ``netG.parameters()``) and no optimizer over
        them steps in between: the gradients the first backward gives them are discarded
        unread, so the first loss needs no graph through them. Unsafe: the first backward
        no longer computes those (unused) gradients; the verifier's run shows them
        discarded (:mod:`gradfix.verify.oracle`)."""
        binding = self.analysis.reaching_binding(name, statement)
        if binding is None or binding.kind != "assign" or binding.value is None:
            return None
        if self._reads_of(binding.node, self._root(call), call) != 1:
            return None  # ``netD(fake) + penalty(fake)``: one detach would not cut them all
        modules = self._makers(binding.value, binding.node)
        if not modules or not self._reset_before(modules, call, later):
            return None

        def detached(editor: Editor, node: cst.CSTNode) -> cst.Call:
            assert isinstance(node, cst.Name)
            return cst.Call(func=cst.Attribute(value=node, attr=cst.Name("detach")))

        return self.plan_replace(
            name, detached, f"Pass `{name.id}.detach()`", safety=FixSafety.UNSAFE
        )

    def _reads_of(self, bound_by: ast.AST, root: ast.expr | None, call: ast.Call) -> int:
        """How many names in ``root``'s graph (followed through assignments) read the
        value that ``bound_by`` binds."""
        count = 0
        pending: list[tuple[ast.expr, ast.AST]] = [] if root is None else [(root, call)]
        seen: set[int] = set()
        while pending:
            expr, at = pending.pop()
            for name in (n for n in ast.walk(expr) if type(n) is ast.Name):
                binding = self.analysis.reaching_binding(name, at)
                if binding is None or binding.value is None:
                    continue
                if binding.node is bound_by:
                    count += 1
                elif id(binding.node) not in seen:
                    seen.add(id(binding.node))
                    pending.append((binding.value, binding.node))
        return count

    def _makers(self, value: ast.expr, at: ast.AST) -> set[str] | None:
        """The names of the modules ``value`` calls (``netG`` of ``netG(noise)``), when
        every other value it reads carries no graph (None otherwise)."""
        modules: dict[int, str] = {}
        for node in ast.walk(value):
            if type(node) is ast.Call and self.analysis.is_module(node.func, at):
                if type(node.func) is not ast.Name:
                    return None
                modules[id(node.func)] = node.func.id
        for node in ast.walk(value):
            if type(node) is not ast.Name or id(node) in modules:
                continue
            if self.analysis.is_module(node, at) or self._may_carry_graph(node, at, 0):
                return None  # ``netD.weight``, a value with a graph of its own
        return set(modules.values()) or None

    def _reset_before(self, modules: set[str], call: ast.Call, later: ast.Call) -> bool:
        """Between ``call`` and ``later`` each module's gradients are reset
        (``netG.zero_grad()``, ``optimizerG.zero_grad()``) before any optimizer that
        may hold its parameters steps."""
        start, end = self.analysis.index(call), self.analysis.index(later)
        reset: set[str] = set()
        for other in self._rest_of_block(call).calls:
            func = other.func
            if not start < self.analysis.index(other) < end or type(func) is not ast.Attribute:
                continue
            held = self._trained_by(func.value, other)
            if func.attr == "zero_grad" and held is not None:
                reset |= modules & held
            elif func.attr == "step" and (modules - reset) & (modules if held is None else held):
                return False  # a step reads the gradients before they are reset
        return reset == modules

    def _trained_by(self, receiver: ast.expr, at: ast.AST) -> set[str] | None:
        """The module names whose parameters ``receiver`` holds: a module itself, or an
        optimizer made from ``<module>.parameters()``; None when unknown (any)."""
        if type(receiver) is not ast.Name:
            return None
        if self.analysis.is_module(receiver, at):
            return {receiver.id}
        binding = self.analysis.reaching_binding(receiver, at)
        value = None if binding is None else binding.value
        params = argument(value, "params", 0) if type(value) is ast.Call else None
        if (
            type(params) is ast.Call
            and type(params.func) is ast.Attribute
            and params.func.attr == "parameters"
            and type(params.func.value) is ast.Name
            and not call_arguments(params)
        ):
            return {params.func.value.id}
        return None

    def _shared_message(self, name: ast.Name, later: ast.Call) -> str:
        return (
            f"`{name.id}` brings a graph the backward at line {later.lineno} runs through "
            "again after this loss's backward freed it, with parameters updated in between: "
            f"pass `{name.id}.detach()` here if this loss must not train what made it, or "
            "recompute it"
        )

    # -- where the second pass comes from ------------------------------------------------
    def _stale_forward(self, call: ast.Call, saving: _SavingNodes) -> ast.stmt | None:
        """The statement starting the part of ``call``'s graph evaluated once before the
        loop that reruns ``call``: the second iteration backpropagates through it again."""
        loop = self._innermost_loop(call)
        if loop is None or self._leaves_loop_after(call):
            return None
        start = self.analysis.index(loop)
        before = [
            expr
            for expr, at in saving.values()
            if self.analysis.index(at) < start and not self.analysis.contains(loop, at)
        ]
        if not before:
            return None
        first = min(before, key=self.analysis.index)
        return self.analysis.enclosing_statement(first)

    def _moved_into_loop(
        self, stale: ast.stmt, call: ast.Call, saving: _SavingNodes
    ) -> FixPlan | None:
        """The assignments from ``stale`` to the loop (a chain, each reading the one
        before) moved to the top of its body, when the loop rebinds nothing they read or
        bind. On a run's evidence the rerun proves it; without one, only a forward the
        analysis shows can be evaluated again unchanged (:meth:`_recomputable`)."""
        loop = self._innermost_loop(call)
        block = self.analysis.statement_block(stale)
        if loop is None or block is None:
            return None
        proven = self.proven_at_run(stale.lineno, "backward-twice")
        start = next(i for i, s in enumerate(block) if s is stale)
        end = next((i for i, s in enumerate(block) if s is loop), None)
        if end is None:
            return None
        if not proven:
            start = self._forward_start(block, start, end)
        moved = block[start:end]
        if not moved or not all(_plain_assignment(s) for s in moved):
            return None
        bound = set(_bound(moved[0].targets))  # type: ignore[attr-defined]
        for statement in moved[1:]:
            if not _read(statement.value) & bound:  # type: ignore[attr-defined]
                return None  # not the forward's chain: it may not belong in the loop
            bound |= set(_bound(statement.targets))  # type: ignore[attr-defined]
        read = set().union(*(_read(s.value) for s in moved))  # type: ignore[attr-defined]
        header = loop.test if type(loop) is ast.While else loop.iter  # type: ignore[union-attr]
        if _rebound_in(loop) & (read | bound) or _read(header) & bound:
            return None
        if not proven and not self._recomputable(moved, loop, saving):
            return None
        lines = f"{moved[0].lineno}-{moved[-1].lineno}" if len(moved) > 1 else moved[0].lineno
        # Without a run, unsafe: from the second iteration on the forward sees the updated
        # parameters (what the fix is for), which the original never computed.
        safety = None if proven else FixSafety.UNSAFE
        return self.plan(
            functools.partial(_move_into_loop, moved, loop),
            f"Move the forward (line {lines}) into the loop",
            safety=safety,
        )

    # -- a forward the loop can evaluate again -------------------------------------------
    def _forward_start(self, block: list[ast.stmt], start: int, end: int) -> int:
        """Extend the moved statements upwards over the assignments they read that carry
        the graph without saving (``h = w + 1`` before ``y = h.exp()``): left before the
        loop, their values would stay those of the first iteration."""
        while start > 0 and _plain_assignment(block[start - 1]):
            previous = block[start - 1]
            read = set().union(*(_read(s.value) for s in block[start:end]))  # type: ignore[attr-defined]
            if not set(_bound(previous.targets)) & read:  # type: ignore[attr-defined]
                break
            value = previous.value  # type: ignore[attr-defined]
            if self.analysis.leaf_value_reason(value, previous) is not None:
                break  # a leaf: the loop updates it in place
            if not self._may_carry_graph(value, previous, 0):
                break
            start -= 1
        return start

    def _recomputable(
        self, moved: list[ast.stmt], loop: ast.For | ast.AsyncFor | ast.While, saving: _SavingNodes
    ) -> bool:
        """Moving ``moved`` to the top of ``loop``'s body keeps the first iteration's
        forward as it was, and what the program reads after the loop:

        - the statements hold the whole part of the graph evaluated before the loop, and
          read no value made before them that carries a graph of its own (only leaves,
          which the loop's updates change in place, and constants);
        - they only evaluate torch ops: no call with effects (``print``, I/O, a function
          of the project) and no draw from the random number generator, which would give
          every later draw other numbers;
        - a name they bind that is read after the loop keeps a value there only if the
          loop runs at least once (``range(5)``): after the fix it holds the last
          iteration's value, which the original (failing at its second backward) has
          only when the loop ran once, and then the two agree.
        """
        first, last = self.analysis.index(moved[0]), self.analysis.index(loop)
        inside = [at for _, at in saving.values() if first <= self.analysis.index(at) < last]
        outside = [
            at
            for _, at in saving.values()
            if self.analysis.index(at) < first and not self.analysis.contains(loop, at)
        ]
        if outside or not inside:
            return False
        if not all(self._pure_forward(s.value, s) for s in moved):  # type: ignore[attr-defined]
            return False
        if any(self._stale_input(s, moved) for s in moved):
            return False
        bound = set().union(*(_bound(s.targets) for s in moved))  # type: ignore[attr-defined]
        return not self._read_elsewhere(bound, moved, loop) or _runs_at_least_once(loop)

    def _stale_input(self, statement: ast.stmt, moved: list[ast.stmt]) -> bool:
        """``statement`` reads a name whose value, made before it, carries a graph that
        is not a leaf: left out of the loop, that value would not follow the updates."""
        for name in (n for n in ast.walk(statement.value) if type(n) is ast.Name):  # type: ignore[attr-defined]
            binding = self.analysis.reaching_binding(name, statement)
            if binding is None or binding.kind != "assign" or binding.value is None:
                continue  # a parameter, an import, a loop target: not made by this forward
            if any(binding.node is s for s in moved):
                continue  # bound by a moved statement before it (the chain)
            if self.analysis.leaf_reason(name, statement) is not None:
                continue
            if self._may_carry_graph(binding.value, binding.node, 0):
                return True
        return False

    def _may_carry_graph(self, value: ast.expr, at: ast.AST, depth: int) -> bool:
        """``value`` may require grad: shown to, a model's output, or made from a leaf
        or such a value (followed through assignments; unknown beyond the depth)."""
        if depth > 8:
            return True
        if self.analysis.requires_grad(value, at):
            return True
        for node in ast.walk(value):
            if type(node) is ast.Call and self.analysis.is_module(node.func, at):
                return True
            if type(node) is not ast.Name:
                continue
            if self.analysis.leaf_reason(node, at) is not None:
                return True
            binding = self.analysis.reaching_binding(node, at)
            if binding is not None and binding.kind == "assign" and binding.value is not None:
                if self._may_carry_graph(binding.value, binding.node, depth + 1):
                    return True
        return False

    def _pure_forward(self, value: ast.expr, at: ast.AST) -> bool:
        """``value`` evaluates torch ops only, none of them in place or random."""
        for node in ast.walk(value):
            if isinstance(node, (ast.NamedExpr, ast.Await, ast.Yield, ast.YieldFrom, *_DEFERRED)):
                return False
            if type(node) is ast.Call and not self._pure_call(node, at):
                return False
        return True

    def _pure_call(self, call: ast.Call, at: ast.AST) -> bool:
        name = self.analysis.call_name(call)
        if name is not None:
            head, _, op = name.rpartition(".")
            if f"{head}." not in OP_NAMESPACES:
                return False  # print, open, a function of the project...
            return (op in OPS or op in FACTORY_FUNCTIONS) and _deterministic(op)
        func = call.func
        if type(func) is ast.Name and func.id in _PURE_BUILTINS:
            return self.analysis.reaching_binding(func, at) is None  # not shadowed
        layer = self.analysis.nn_module_class(func, at)
        if layer is not None:
            functional = functional_of_module(layer)
            return functional is not None and _deterministic(functional[0])
        if type(func) is not ast.Attribute or self.analysis.is_module(func, at):
            return False
        if func.attr in NON_TENSOR_METHODS:
            return True  # ``x.size(0)``, ``x.dim()``: a question, no change
        return (
            func.attr in OPS and "Tensor" in OPS[func.attr]["where"] and _deterministic(func.attr)
        )

    def _read_elsewhere(self, names: set[str], moved: list[ast.stmt], loop: ast.AST) -> bool:
        """A name of ``names`` is read in the scope outside ``moved`` and ``loop``."""
        scope = self.analysis.scope_of(loop).node
        for node in ast.walk(scope):
            if type(node) is not ast.Name or node.id not in names or type(node.ctx) is not ast.Load:
                continue
            if self.analysis.contains(loop, node):
                continue
            if not any(self.analysis.contains(s, node) for s in moved):
                return True
        return False

    def _leaves_loop_after(self, call: ast.Call) -> bool:
        """``call``'s block leaves the loop after it (``break``, ``return``): it runs once."""
        statement = self.analysis.enclosing_statement(call)
        block = None if statement is None else self.analysis.statement_block(statement)
        return block is not None and any(
            type(s) in (ast.Break, ast.Return, ast.Raise) for s in block
        )

    def _stale_message(self, call: ast.Call) -> str:
        return (
            "Graph built once before the loop, backpropagated in every iteration (line "
            f"{call.lineno}): the second backward runs through this freed graph; compute it "
            "inside the loop"
        )

    def _rest_of_block(self, call: ast.Call) -> _CallCollector:
        """Calls and augmented assignments of the statements of ``call``'s block from
        ``call``'s statement on (they run after it whenever it runs), same scope only."""
        collector = _CallCollector()
        statement = self.analysis.enclosing_statement(call)
        while statement is not None and self.analysis.in_one_line_suite(statement):
            # ``if c: loss.backward()``: LibCST's statement is the ``if`` (in its block)
            owner = self.analysis.parent(statement)
            statement = self.analysis.enclosing_statement(owner) if owner else None
        block = None if statement is None else self.analysis.statement_block(statement)
        if block is None:
            return collector
        start = next(i for i, sibling in enumerate(block) if sibling is statement)
        for sibling in block[start:]:
            collector.visit(sibling)
        return collector

    def _later_backward_calls(self, call: ast.Call) -> Iterator[ast.Call]:
        for later in self._rest_of_block(call).calls:
            if self.analysis.index(later) > self.analysis.index(call) and self._positions(later):
                yield later

    def _fix(self, call: ast.Call, later: ast.Call) -> FixPlan | None:
        if self._updates_between(call, later):
            return None
        positions = self._positions(call)
        assert positions is not None

        def retain_graph(editor: Editor, node: cst.CSTNode) -> cst.Call:
            assert isinstance(node, cst.Call)
            retain = cst_argument(node, "retain_graph", positions[0])
            true = cst.Name("True")
            if retain is None:
                return with_argument(node, "retain_graph", true)
            args = [a.with_changes(value=true) if a is retain else a for a in node.args]
            return node.with_changes(args=args)

        return self.plan_replace(call, retain_graph, "Pass `retain_graph=True`")

    def _renamed_retain(self, call: ast.Call) -> FixPlan:
        """``retain_variables=`` (torch < 1.5) renamed ``retain_graph=``, its value kept:
        the original raises a TypeError at the call, so there is nothing to disagree with."""

        def rename(editor: Editor, node: cst.CSTNode) -> cst.Call:
            assert isinstance(node, cst.Call)
            old = cst_argument(node, "retain_variables", None)
            args = [
                a.with_changes(keyword=cst.Name("retain_graph")) if a is old else a
                for a in node.args
            ]
            return node.with_changes(args=args)

        return self.plan_replace(call, rename, "Rename `retain_variables` to `retain_graph`")

    def _updates_between(self, call: ast.Call, later: ast.Call) -> bool:
        """An optimizer step or an in-place op runs between the two calls."""
        start, end = self.analysis.index(call), self.analysis.index(later)
        rest = self._rest_of_block(call)
        for other in rest.calls:
            func = other.func
            if start < self.analysis.index(other) < end and type(func) is ast.Attribute:
                if func.attr == "step" or func.attr.endswith("_"):
                    return True
        return any(start < self.analysis.index(a) < end for a in rest.augassigns)


def _bound(targets: list[ast.expr]) -> list[str]:
    """The plain names an assignment binds (``out, (h, c) = ...`` -> out, h, c)."""
    names: list[str] = []
    for target in targets:
        if type(target) is ast.Name:
            names.append(target.id)
        elif isinstance(target, (ast.Tuple, ast.List)):
            names += _bound(target.elts)
    return names


def _deterministic(op: str) -> bool:
    """An op that changes nothing in place and draws no random number."""
    return op not in RANDOM_OPS and not is_inplace_method(op)


def _runs_at_least_once(loop: ast.For | ast.AsyncFor | ast.While) -> bool:
    """``for _ in range(5)``, ``while True``: the body runs before anything after it."""
    if type(loop) is ast.While:
        return type(loop.test) is ast.Constant and loop.test.value is True
    return iterates_at_least_once(loop.iter)  # type: ignore[union-attr]


def _move_into_loop(moved: list[ast.stmt], loop: ast.AST, editor: Editor) -> list[Edit] | None:
    """``moved`` (the lines before ``loop``) at the top of its body. Blank lines before the
    first moved statement stay above the loop, the comments just above each statement go
    with it; the loop's own comments stay on it, and the blank lines that parted the
    moved lines from the loop now part them from the rest of the body."""
    originals = [editor.statement(s) for s in moved]
    statements = list(originals)
    target = editor.node(loop)
    assert isinstance(target, (cst.For, cst.While))
    body = target.body
    if not isinstance(body, cst.IndentedBlock) or not body.body:
        return None  # ``for ...: loss.backward()`` on one line
    if not all(isinstance(s, cst.SimpleStatementLine) and len(s.body) == 1 for s in statements):
        return None  # ``a = 1; b = 2``: a line moves as a whole or not at all
    above, first_comments = _split_blank_lines(statements[0].leading_lines)
    separator, loop_comments = _split_blank_lines(target.leading_lines)
    statements[0] = statements[0].with_changes(leading_lines=first_comments)
    rest: list[cst.BaseStatement] = list(body.body)
    first = rest[0]
    assert isinstance(first, (cst.SimpleStatementLine, cst.BaseCompoundStatement))
    rest[0] = first.with_changes(leading_lines=[*separator, *first.leading_lines])
    new_body = body.with_changes(body=[*statements, *rest])
    new_loop = target.with_changes(body=new_body, leading_lines=[*above, *loop_comments])
    return [Edit(target, new_loop)] + [Edit(s, cst.RemovalSentinel.REMOVE) for s in originals]


def _split_blank_lines(
    lines: Sequence[cst.EmptyLine],
) -> tuple[list[cst.EmptyLine], list[cst.EmptyLine]]:
    """``lines`` (a statement's leading lines) cut before its first comment: the blank
    lines that part it from what precedes, and its comments (blank lines among them too)."""
    cut = next((i for i, line in enumerate(lines) if line.comment is not None), len(lines))
    return _unindented(lines[:cut]), _unindented(lines[cut:])


def _unindented(lines: Sequence[cst.EmptyLine]) -> list[cst.EmptyLine]:
    """Blank lines written without the block's indentation (no trailing spaces)."""
    return [line.with_changes(indent=False) if line.comment is None else line for line in lines]


def _plain_assignment(statement: ast.stmt) -> bool:
    """``a = <expr>`` or ``a = b = <expr>``, to plain names."""
    return type(statement) is ast.Assign and all(type(t) is ast.Name for t in statement.targets)


def _rebound_in(loop: ast.For | ast.AsyncFor | ast.While) -> set[str]:
    """The names a loop binds (its target, its body's assignments, nested ones too)."""
    return {n.id for n in ast.walk(loop) if type(n) is ast.Name and type(n.ctx) is ast.Store}


def _read(value: ast.expr) -> set[str]:
    return {n.id for n in ast.walk(value) if type(n) is ast.Name and type(n.ctx) is ast.Load}


class _CallCollector(ast.NodeVisitor):
    """Calls and augmented assignments in source order, outside nested functions, classes,
    lambdas, list comprehensions and generator expressions."""

    def __init__(self) -> None:
        self.calls: list[ast.Call] = []
        self.augassigns: list[ast.AugAssign] = []

    def generic_visit(self, node: ast.AST) -> None:
        if type(node) is ast.Call:
            self.calls.append(node)
        elif type(node) is ast.AugAssign:
            self.augassigns.append(node)
        elif isinstance(node, _DEFERRED):
            return
        for child in source_children(node):
            self.visit(child)


def _self_accumulated(cls: ast.ClassDef) -> str | None:
    """An attribute a method other than ``__init__`` rebinds from itself without
    detaching it (``self.M = self.M + k @ v``): state kept from call to call."""
    for method in cls.body:
        if type(method) is not ast.FunctionDef or method.name == "__init__":
            continue
        for node in ast.walk(method):
            if type(node) is not ast.Assign or len(node.targets) != 1:
                continue
            target = node.targets[0]
            if type(target) is not ast.Attribute or type(node.value) is not ast.BinOp:
                continue
            reads = [
                n
                for n in ast.walk(node.value)
                if type(n) is ast.Attribute
                and n.attr == target.attr
                and ast.dump(n.value) == ast.dump(target.value)
            ]
            detached = any(
                type(n) is ast.Attribute and n.attr in GRAD_CUTTING_OPS
                for n in ast.walk(node.value)
            )
            if reads and not detached:
                return target.attr
    return None


def _moved_itself(value: ast.expr, name: str) -> bool:
    """``x.to(device)``, ``x.cuda()``, ``x.float()`` of the name itself: on the same device
    and dtype the tensor itself, no graph carried."""
    if type(value) is not ast.Call or type(value.func) is not ast.Attribute:
        return False
    receiver = value.func.value
    moves = ("to", "cuda", "cpu", "float", "double", "half", "type", "contiguous", "train")
    return type(receiver) is ast.Name and receiver.id == name and value.func.attr in moves


def _target_names(targets: list[ast.expr]) -> list[ast.Name]:
    """The names an assignment binds, through tuples and lists (``out, (h, c) = ...``)."""
    names: list[ast.Name] = []
    for target in targets:
        if type(target) is ast.Name:
            names.append(target)
        elif type(target) is ast.Tuple or type(target) is ast.List:
            names += _target_names(target.elts)
    return names


def _argument_values(call: ast.Call) -> list[ast.expr]:
    """The values of ``call``'s arguments in source order (keywords may precede ``*args``)."""
    if call.keywords and call.args:
        return [argument_value(a) for a in source_children(call)[1:]]  # type: ignore[arg-type]
    return argument_values(call)


def _operands(expr: ast.expr) -> list[ast.expr]:
    """The sub-expressions whose values flow into ``expr`` (not names of methods)."""
    if type(expr) is ast.Attribute or type(expr) is ast.Subscript:
        return [expr.value]
    if type(expr) is ast.Call:
        func = [expr.func.value] if type(expr.func) is ast.Attribute else []
        return func + _argument_values(expr)
    if type(expr) is ast.BinOp:
        return [expr.left, expr.right]
    if type(expr) is ast.UnaryOp:
        return [expr.operand]
    if type(expr) is ast.Tuple or type(expr) is ast.List:
        return [argument_value(element) for element in expr.elts]
    return []


def _is_constant(expr: ast.expr, source: str) -> bool:
    """A literal number, string, ``True``, ``False`` or ``None`` (signs allowed)."""
    if type(expr) is ast.UnaryOp:
        return _is_constant(expr.operand, source)
    if type(expr) is not ast.Constant or type(expr.value) in (complex, type(...)):
        return False
    return not is_concatenated_string(expr, source)
