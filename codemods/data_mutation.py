"""GF205 data-mutation."""

from __future__ import annotations

import ast

import libcst as cst

from gradfix.edits import Editor, attribute_owner
from gradfix.lazy import lazy_class
from gradfix.no_grad_block import (
    NoGradBlockRule,
    Rewrite,
    Site,
    changes_in_place,
    inplace_receiver,
    inplace_target,
    used_in_graph_before,
)
from gradfix.rule import Edit, FixAvailability, FixPlan, FixSafety, Invalid, Valid
from gradfix.semantic import LAYER_PARAMETERS, VIEW_ATTRIBUTES, Semantic, is_number_literal
from gradfix.semantic.syntax import argument_value, call_arguments
from gradfix.torch_facts import LIKE_FACTORIES, VIEW_OPS, is_inplace_method

#: Attributes that hold a tensor on whatever object has them (``layer.weight``).
TENSOR_ATTRIBUTES = LAYER_PARAMETERS | frozenset({"grad", "running_mean", "running_var"})
#: A gradient is not saved for backward (outside ``create_graph=True``): its ``.data`` hides
#: nothing from the version check, so ``p.grad.data.zero_()`` is not reported on its own.
GRADIENT = "grad"
#: Iterating these methods' results yields tensors (named_*: as the second item).
TENSOR_ITERATORS = frozenset({"parameters", "buffers", "named_parameters", "named_buffers"})
#: Methods and torch functions whose result shares storage with the receiver.
ALIASING = VIEW_OPS | frozenset(
    "reshape flatten contiguous cpu cuda to float double half bfloat16 type chunk split "
    "unbind view_as_real view_as_complex".split()
)
#: What builds a ``PackedSequence``, whose ``.data`` is a field (a tensor in the graph), not
#: ``Tensor.data``.
PACKING = frozenset(
    f"torch.nn.utils.rnn.{n}" for n in ("pack_padded_sequence", "pack_sequence", "PackedSequence")
)
#: Builtins that only look at a tensor's values.
READING_BUILTINS = frozenset("print len float int bool str repr format isinstance".split())
#: Ops whose result has the shape and dtype of their first operand, given number arguments.
LAYOUT_KEEPING = frozenset(
    "clamp clamp_min clamp_max clip abs neg exp log sqrt sigmoid tanh relu mul add sub div "
    "pow sign clone detach normal_ uniform_ zero_ fill_ mul_ add_ sub_ div_ clamp_".split()
)
#: What a tensor says about itself, not its values: ``w.data.dtype`` is no read of ``.data``.
METADATA = frozenset(
    "shape dtype device ndim layout is_cuda is_sparse is_quantized is_meta size dim numel "
    "nelement element_size data_ptr is_contiguous is_floating_point get_device".split()
)


class DataMutation(NoGradBlockRule):
    """
    ## What it does
    Finds `x.data` used to change a tensor (`w.data.normal_()`, `p.data.add_(...)`,
    `w.data[:] = 0`, `w.data = ...`) or to read its values (`y = x.data * 2`,
    `x.data.clone()`), and rewrites them with `torch.no_grad()` and `x.detach()`.
    Off by default (a modernisation of working code): enable it with `--select GF205`.

    ## Why is this bad?
    `x.data` is the same storage as `x` but hidden from autograd: changes made through it
    skip the version counter that autograd uses to detect tensors modified after being
    saved for backward. If `w` was saved (`y = x @ w`) and then `w.data.mul_(2)` runs
    before `y.backward()`, the gradient is silently computed from the new values.
    `with torch.no_grad(): w.mul_(2)` and `w.detach()` share storage too but keep the
    version check, so the same mistake raises "one of the variables needed for gradient
    computation has been modified by an inplace operation" instead of training on a wrong
    gradient. `w.data = t` even swaps the tensor's storage, shape and dtype behind
    autograd's back. (Without `.data` and outside `no_grad`, the update raises "a leaf
    Variable that requires grad is being used in an in-place operation": GF201 leaf-inplace
    wraps it in `no_grad`, the same fix this rule makes.)

    ## Example
    ```python
    for p in model.parameters():
        p.data.normal_(0.0, 0.02)

    for p in params:
        p.data.add_(p.grad.data, alpha=-lr)

    w.data = w.data.clamp(-1.0, 1.0)
    snapshot = w.data.clone()
    ```

    ## Use instead
    ```python
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.02)

    for p in params:
        with torch.no_grad():
            p.add_(p.grad, alpha=-lr)

    with torch.no_grad():
        w.copy_(w.clamp(-1.0, 1.0))
    snapshot = w.detach().clone()
    ```
    Consecutive updates share one block, and a loop that only updates tensors is wrapped
    whole. Inside an existing `torch.no_grad()` block `.data` is just dropped.
    `p.grad.data` alone is not reported (a gradient is not saved for backward, so `.data`
    hides nothing there); inside a rewritten update it is simplified to `p.grad`. The
    `.data` of objects that are not tensors is not reported: a `PackedSequence` (from
    `pack_padded_sequence`, or the output of an RNN called on one: its `.data` is the
    packed tensor, in the graph) and a mapping's items (`edges.data["w"]` in DGL).

    ## Fix safety
    The rewrite keeps every value; what changes is that autograd now checks the update.
    Safe for updates with no pending graph in sight (initialisation, optimizer and EMA
    steps after `backward()`) and for reads whose result is a new tensor
    (`x.data * 2`, `x.data.clone()`, `x.data.cpu().numpy()`, arguments of torch ops).
    Unsafe where the version check can turn silently wrong gradients into an error at
    backward: an update of a tensor already used in the graph in the same scope with no
    `backward()` in between, an update inside `forward()`, and a read bound to a name,
    returned or passed on as a view (`alias = w.data`: an in-place change through the
    alias is now checked too). `w.data = expr` becomes `w.copy_(expr)` (unsafe: it writes
    into the existing storage, which views and tied weights share, instead of replacing it)
    only when `expr` keeps the shape and dtype of `w` (`w.data * 0.5`,
    `w.data.clamp(...)`, `torch.randn_like(w)`); other assignments can change shape,
    dtype or device and are reported without a fix: use `copy_` for values, a new
    `nn.Parameter` or `module.to(...)` for the rest.

    Under `gradfix trace --write`, a read at a line where the run showed the graph cut
    (weights before the read that never get a gradient, or a backward that finds no graph:
    `return torch.stack(logits, 1).data` in a decoder whose loss is trained) has `.data`
    dropped instead: the value is the same and the weights get their gradient back. Unsafe
    (what trains changes), and written only when running the program again proves it
    (gradients compared with finite differences of the forward). A static `gradfix fix`,
    which cannot tell a cut meant to freeze from one that loses training, keeps `.detach()`.
    """

    code = "GF205"
    fix_restores_gradient = True
    name = "data-mutation"
    synopsis = (
        "Finds `x.data` used to change or read a tensor past autograd and rewrites it to "
        "`torch.no_grad()` updates and `x.detach()` reads."
    )
    message = "`.data` bypasses autograd's version check; use `torch.no_grad()` or `.detach()`"
    fix_safety = FixSafety.SAFE
    fix_availability = FixAvailability.SOMETIMES
    fix_safeties = (FixSafety.SAFE, FixSafety.UNSAFE)
    default_enabled = False

    VALID = [
        Valid(
            """
            import torch
            w = torch.randn(3, requires_grad=True)
            with torch.no_grad():
                w.normal_()
            snapshot = w.detach().clone()
            """
        ),
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader
            loader = torch.utils.data.DataLoader(range(4))
            """
        ),
        Valid(
            """
            import torch

            class Card:
                def __init__(self, data):
                    self.data = data

            def update(card, packed):
                card.data = {"license": "mit"}
                return packed.data.sum()
            """
        ),
        Valid(
            """
            import torch
            from torch import nn
            from torch.nn.utils.rnn import pack_padded_sequence

            class Tagger(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.lstm = nn.LSTM(3, 5)
                    self.head = nn.Linear(5, 2)

                def forward(self, x, lengths):
                    packed = pack_padded_sequence(x, lengths)
                    out, _ = self.lstm(packed)
                    return self.head(out.data)  # the packed rows, in the graph

            def edge_weight(edges):
                edges.data["w"] = edges.data["w"].clamp(min=0)  # a graph's edge features
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            from torch import nn
            model = nn.Linear(4, 2)
            for p in model.parameters():
                p.data.normal_(0.0, 0.02)
            """,
            """
            import torch
            from torch import nn
            model = nn.Linear(4, 2)
            with torch.no_grad():
                for p in model.parameters():
                    p.normal_(0.0, 0.02)
            """,
        ),
        Invalid(
            """
            import torch as th
            w = th.randn(3, requires_grad=True)
            w.data[:] = 0
            w.data.fill_(1.0)  # reset
            copy = w.data * 2
            """,
            """
            import torch as th
            w = th.randn(3, requires_grad=True)
            with th.no_grad():
                w[:] = 0
                w.fill_(1.0)  # reset
            copy = w.detach() * 2
            """,
        ),
        Invalid(
            """
            import torch

            @torch.no_grad()
            def ema_update(ema, model, decay):
                for e, p in zip(ema.parameters(), model.parameters()):
                    e.data.mul_(decay).add_(p.data, alpha=1 - decay)
            """,
            """
            import torch

            @torch.no_grad()
            def ema_update(ema, model, decay):
                for e, p in zip(ema.parameters(), model.parameters()):
                    e.mul_(decay).add_(p, alpha=1 - decay)
            """,
        ),
        Invalid(
            """
            import torch
            w = torch.randn(3, requires_grad=True)
            w.data = w.data.to(torch.float64)
            """,
            report_only=True,
        ),
        Invalid(
            """
            import torch
            w = torch.randn(4, requires_grad=True)
            w.data = w.data.clamp(-0.5, 0.5)
            """,
            """
            import torch
            w = torch.randn(4, requires_grad=True)
            with torch.no_grad():
                w.copy_(w.clamp(-0.5, 0.5))
            """,
        ),
    ]

    # -- mutations: wrapped in no_grad by NoGradBlockRule ------------------------------------
    def may_be_site(self, small: ast.stmt) -> bool:
        return (type(small) is ast.Assign and _is_data_target(small)) or super().may_be_site(small)

    def site(self, small: ast.stmt) -> Site | None:
        if self.analysis.in_no_grad(small):
            return None
        return self._mutation_site(small)

    def site_message(self, site: Site) -> str:
        owner = self.text_of(site.target)
        if type(site.statement) is ast.Assign and _is_data_target(site.statement):
            if not site.fixable:
                return (
                    f"`{owner}.data = ...` swaps the storage of `{owner}` behind autograd; "
                    f"use `with torch.no_grad(): {owner}.copy_(...)` for same-shape values, a "
                    "new `nn.Parameter` or `module.to(...)` to change shape, dtype or device"
                )
            return (
                f"`{owner}.data = ...` replaces the storage of `{owner}` behind autograd; "
                f"write the values with `{owner}.copy_(...)` under `torch.no_grad()`"
            )
        text = (
            f"Mutation through `{owner}.data` skips autograd's version check; "
            f"change `{owner}` under `torch.no_grad()`"
        )
        if site.safety is FixSafety.UNSAFE:
            text += f" (unsafe: `{owner}` may be saved by a pending graph)"
        return text

    def _mutation_site(self, small: ast.stmt) -> Site | None:
        if type(small) is ast.Assign and _is_data_target(small):
            return self._data_assignment_site(small)
        target = _strip_subscripts(inplace_target(small))
        if not (type(target) is ast.Attribute and target.attr == "data"):
            return None
        owner = target.value
        if _is_gradient(owner) or not self._owns_tensor_data(owner, small, mutated=True):
            return None
        safety = self._mutation_safety(owner, small)
        drops = self._without_data([small], target)
        return Site(small, owner, replacement=_statement_without(drops), safety=safety)

    def _data_assignment_site(self, small: ast.Assign) -> Site | None:
        """``w.data = expr``: ``w.copy_(expr)`` when ``expr`` keeps the layout of ``w``."""
        data = small.targets[0]
        assert type(data) is ast.Attribute
        owner = data.value
        if _is_gradient(owner) or not self._owns_tensor_data(owner, small, mutated=False):
            return None
        site = Site(small, owner, safety=FixSafety.UNSAFE)
        value = small.value
        changed = _strip_subscripts(inplace_receiver(value))
        if type(changed) is ast.Attribute and self.text_of(changed) == self.text_of(data):
            # ``w.data = w.data.normal_()``: the in-place call already did it all
            drop = self._without_data([value], changed)
            site.replacement = _value_statement(drop)
            site.safety = self._mutation_safety(owner, small)
        elif len(small.targets) == 1 and self._keeps_layout(value, owner, small):
            site.replacement = _copy_statement(self._without_data([owner, value], data))
        else:
            site.fixable = False
        return site

    def _mutation_safety(self, owner: ast.expr, small: ast.AST) -> FixSafety:
        function = self.analysis.enclosing_function(small)
        if function is not None and function.name == "forward":
            return FixSafety.UNSAFE
        if used_in_graph_before(self, owner, small):
            return FixSafety.UNSAFE
        return FixSafety.SAFE

    # -- mutations inside no_grad: drop .data --------------------------------------------------
    def visit_Expr(self, node: ast.Expr) -> None:
        self._check_mutation_in_no_grad(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        self._check_mutation_in_no_grad(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        if changes_in_place(node):
            self._check_mutation_in_no_grad(node)

    def _check_mutation_in_no_grad(self, small: ast.stmt) -> None:
        if not self.analysis.in_no_grad(small):
            return
        site = self._mutation_site(small)
        if site is None:
            return
        fix = None
        rewrite = site.replacement
        if site.fixable and rewrite is not None:

            def build(editor: Editor) -> list[Edit] | None:
                old = editor.node(small)
                assert isinstance(old, cst.BaseSmallStatement)
                new = rewrite(editor, old)
                return None if new is None else [Edit(old, new)]

            safety = FixSafety.UNSAFE if site.safety is FixSafety.UNSAFE else None
            fix = self.plan(build, "Drop `.data`", safety=safety)
        self.report(small, self.site_message(site), fix=fix)

    # -- reads -------------------------------------------------------------------------------
    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr != "data" or not self._is_load(node):
            return
        small = self._small_statement(node)
        if small is not None and self._mutation_site(small) is not None:
            return  # reported, and rewritten, with the mutation
        context = self._read_context(node)
        owner = node.value
        if context == "metadata" or _is_gradient(owner):
            return  # ``w.data.dtype``: the same answer as ``w.dtype``, no value is read
        if context == "mutation":
            if self._owns_tensor_data(owner, node, mutated=True):
                self.report(
                    node,
                    f"Mutation through `{self.text_of(owner)}.data` inside an "
                    "expression skips autograd's version check",
                )
            return
        if context == "mutation-argument":
            if self._owns_tensor_data(owner, node, mutated=True):
                self._report_mutation_argument(node, owner)
            return
        if not self._owns_tensor_data(owner, node, mutated=False):
            return
        safety = FixSafety.SAFE if context == "copy" else FixSafety.UNSAFE
        code = self.text_of(owner)
        message = f"`{code}.data` reads `{code}` past autograd; use `.detach()`"
        if safety is FixSafety.UNSAFE:
            message += " (unsafe: the result shares storage, and changes through it are checked)"
        fix = self.plan_replace(
            node, _detached_keeping_parentheses, "Use `.detach()`", safety=safety
        )
        if self.proven_at_run(node.lineno, "graph-cut", "grad-none"):
            # the run showed that weights before this read never get a gradient
            fix = self.plan_replace(node, attribute_owner, _RECONNECT, safety=FixSafety.UNSAFE)
        self.report(node, message, fix=fix)

    def _report_mutation_argument(self, data: ast.Attribute, owner: ast.expr) -> None:
        """``nn.init.zeros_(w.data)``: torch's initialisers run under ``no_grad`` themselves,
        so ``.data`` is dropped; another function gets ``w.detach()``, which it can change
        in place too (unsafe: the change is then version-checked)."""
        call = next(a for a in self.analysis.ancestors(data) if type(a) is ast.Call)
        assert isinstance(call, ast.Call)
        name = self.analysis.call_name(call) or ""
        message = (
            f"Mutation through `{self.text_of(owner)}.data` by `{self.text_of(call.func)}()` "
            "skips autograd's version check"
        )
        fix: FixPlan
        if name.startswith("torch.nn.init."):
            safety = self._mutation_safety(owner, data)
            fix = self.plan_replace(data, attribute_owner, "Drop `.data`", safety=safety)
        else:
            fix = self.plan_replace(data, _detached, "Use `.detach()`", safety=FixSafety.UNSAFE)
        self.report(data, message, fix=fix)

    def _is_load(self, node: ast.Attribute) -> bool:
        """Not a target: ``w.data = v``, ``w.data, meta = f()``, ``for w.data in ...``."""
        child: ast.AST = node
        parent = self.analysis.parent(node)
        while type(parent) in (ast.Starred, ast.Tuple, ast.List):
            child, parent = parent, self.analysis.parent(parent)  # type: ignore[arg-type]
        if type(parent) in (ast.For, ast.AsyncFor, ast.comprehension):
            return parent.target is not child  # type: ignore[union-attr]
        is_target = type(parent) is ast.Delete or (
            type(parent) is ast.Assign and any(t is child for t in parent.targets)
        )
        if child is not node and not is_target:
            return True  # ``[w.data, 1]``: a read inside a display
        return not (is_target or type(parent) is ast.AugAssign)

    def _small_statement(self, node: ast.AST) -> ast.stmt | None:
        for ancestor in self.analysis.ancestors(node):
            if type(ancestor) is ast.Lambda:
                return None
            if isinstance(ancestor, ast.stmt):
                return None if _is_compound(ancestor) else ancestor
        return None

    def _read_context(self, data: ast.expr) -> str:
        """'copy' when the value read through ``.data`` flows into a new tensor (or a
        number), 'alias' when a tensor sharing its storage escapes, 'mutation' when it is
        changed in place, 'metadata' when only its shape, dtype or device is asked for."""
        analysis = self.analysis
        node: ast.AST = data
        while True:
            parent = analysis.parent(node)
            if type(parent) is ast.Attribute and parent.value is node:
                if parent.attr in METADATA:
                    return "metadata"
                holder = analysis.parent(parent)
                if type(holder) is ast.Assign and any(t is parent for t in holder.targets):
                    return "metadata"  # ``w.data[:2].requires_grad = False`` reads no value
                if type(holder) is ast.Call and holder.func is parent:
                    method = parent.attr
                    if is_inplace_method(method):
                        return "mutation"
                    if method in ALIASING:
                        node = holder
                        continue
                    return "copy"
                if parent.attr in VIEW_ATTRIBUTES:
                    node = parent
                    continue
                return "copy"
            if type(parent) is ast.Subscript and parent.value is node:
                node = parent
                continue
            if type(parent) in (ast.BinOp, ast.UnaryOp) or (
                type(parent) is ast.Compare and parent.left is node
            ):
                return "copy"  # LibCST's ``Comparison`` holds only the left operand
            if type(parent) in (ast.List, ast.Tuple) and self._call_of_argument(parent):
                node = parent  # ``torch.cat([w.data, b.data])``
                continue
            call = self._call_of_argument(node)
            if call is not None:
                if self._changes_arguments(call):
                    return "mutation-argument"  # ``nn.init.zeros_(w.data[0])``
                return "copy" if self._reads_argument(call) else "alias"
            return "alias"

    def _call_of_argument(self, node: ast.AST) -> ast.Call | None:
        """The call ``node`` is an argument of (``f(node)``, ``f(k=node)``, ``f(*node)``)."""
        parent = self.analysis.parent(node)
        if type(parent) is ast.keyword or type(parent) is ast.Starred:
            node, parent = parent, self.analysis.parent(parent)
        if type(parent) is ast.Call and parent.func is not node:
            return parent
        return None

    def _changes_arguments(self, call: ast.Call) -> bool:
        """An imported function named like an in-place op (``nn.init.normal_``,
        ``init.zeros_``) changes its argument; a method (``ema.copy_(p.data)``) reads it."""
        func = call.func
        name = self.analysis.call_name(call)
        if name is None and type(func) is ast.Name:
            name = func.id
        if name is None and type(func) is ast.Attribute and self._is_module(func.value):
            name = func.attr  # ``from ... import initialization as init``
        return name is not None and is_inplace_method(name.rpartition(".")[2])

    def _is_module(self, expr: ast.expr) -> bool:
        """A name bound only by imports (relative imports leave no binding at all)."""
        return type(expr) is ast.Name and all(
            b.kind == "import" for b in self.analysis.bindings(expr)
        )

    def _reads_argument(self, call: ast.Call) -> bool:
        """``call`` only reads its tensor arguments into a new result."""
        func = call.func
        name = self.analysis.call_name(call)
        if name is not None:
            short = name.rpartition(".")[2]
            return (
                name.startswith("torch.")
                and not (
                    short in ALIASING
                    or short.endswith("_")
                    or name.startswith("torch.nn.")
                    and not name.startswith("torch.nn.functional.")
                )
                and name not in ("torch.save",)
            )
        if type(func) is ast.Name:
            return func.id in READING_BUILTINS
        # ``ema.copy_(p.data)``, ``acc.add(x.data)``: the argument is read, not kept
        return (
            type(func) is ast.Attribute
            and func.attr not in ALIASING
            and (is_inplace_method(func.attr) or func.attr in LAYOUT_KEEPING)
        )

    # -- which ``.data`` belongs to a tensor ---------------------------------------------------
    def _owns_tensor_data(self, owner: ast.expr, at: ast.AST, mutated: bool) -> bool:
        """``owner.data`` is ``Tensor.data`` (not a dataset's, a PackedSequence's, a card's)."""
        analysis = self.analysis
        if type(owner) is ast.Name and owner.id == "self":
            return False
        if self._is_packed(owner, at, depth=0) or _keyed_by_string(analysis, owner):
            return False
        if analysis.qualified_name(owner) is not None:
            return False  # ``torch.utils.data``
        if type(owner) is ast.Attribute and owner.attr in TENSOR_ATTRIBUTES:
            return True
        if type(owner) is ast.Name and self._iterates_tensors(owner, at):
            return True
        if analysis.is_tensor(owner, at) or analysis.requires_grad(owner, at):
            return True
        # ``obj.data.normal_(...)``: an in-place torch method on it says it is a tensor
        return mutated and type(owner) in (ast.Name, ast.Attribute, ast.Subscript)

    def _is_packed(self, expr: ast.expr, at: ast.AST, depth: int) -> bool:
        """``expr`` is a ``PackedSequence``: built by ``pack_padded_sequence`` /
        ``pack_sequence``, or the first output of a module called on one (an RNN given
        packed input answers with packed output), through names."""
        if depth > 6:
            return False
        analysis = self.analysis
        if type(expr) is ast.Name:
            binding = analysis.reaching_binding(expr, at)
            if binding is None or binding.value is None or binding.kind != "assign":
                return False
            if binding.unpack_index is not None:
                return binding.unpack_index == 0 and self._packs(binding.value, binding.node, depth)
            return self._is_packed(binding.value, binding.node, depth + 1)
        if type(expr) is ast.Subscript and _is_int(expr.slice, 0):
            return self._packs(expr.value, at, depth)
        return type(expr) is ast.Call and analysis.call_name(expr) in PACKING

    def _packs(self, call: ast.expr, at: ast.AST, depth: int) -> bool:
        """``rnn(packed, h)``: a module call whose first argument is a packed sequence."""
        if type(call) is not ast.Call or not call.args:
            return False
        if not self.analysis.is_module(call.func, at):
            return False
        return self._is_packed(call.args[0], at, depth + 1)

    def _iterates_tensors(self, name: ast.Name, at: ast.AST) -> bool:
        """``name`` is the loop variable of ``for p in model.parameters()`` (or of a
        ``zip`` of such iterators, as EMA code writes)."""
        binding = self.analysis.reaching_binding(name, at)
        if binding is None or binding.kind != "for" or binding.value is None:
            return False
        iterable = binding.value
        if type(iterable) is ast.Call and type(iterable.func) is ast.Name:
            if iterable.func.id == "zip" and binding.unpack_index is not None:
                args = call_arguments(iterable)
                return binding.unpack_index < len(args) and _iterates_parameters(
                    argument_value(args[binding.unpack_index]), None
                )
        return _iterates_parameters(iterable, binding.unpack_index) or (
            self.analysis.parameter_iterable(iterable) == "parameters"
            and binding.unpack_index is None
        )

    # -- rewriting ---------------------------------------------------------------------------
    def _without_data(self, roots: list[ast.AST], changed: ast.Attribute) -> set[ast.Attribute]:
        """The ``x.data`` under ``roots`` that become plain ``x`` under ``no_grad``:
        ``changed`` (the one the statement modifies) and every other tensor's (the
        statement changes a tensor in place; what it reads is consumed, not kept)."""
        return {
            data
            for root in roots
            for data in _data_attributes(root)
            if data is changed or self._owns_tensor_data(data.value, data, mutated=False)
        }

    def _keeps_layout(self, value: ast.expr, owner: ast.expr, at: ast.AST) -> bool:
        """``value`` has the shape and dtype of ``owner`` (a tensor that requires grad, so
        floating point: Python numbers do not change its dtype)."""
        analysis = self.analysis
        floating = (
            analysis.requires_grad(owner, at)
            or (type(owner) is ast.Attribute and owner.attr in LAYER_PARAMETERS)
            or (type(owner) is ast.Name and self._iterates_tensors(owner, at))
        )
        return floating and self._layout_of(value, owner)

    def _layout_of(self, value: ast.expr, owner: ast.expr) -> bool:
        if self._same(value, owner) or (
            type(value) is ast.Attribute and value.attr == "data" and self._same(value.value, owner)
        ):
            return True
        if type(value) is ast.BinOp:
            sides = [value.left, value.right]
            return any(self._layout_of(s, owner) for s in sides) and all(
                is_number_literal(s) or self._layout_of(s, owner) for s in sides
            )
        if type(value) is ast.UnaryOp:
            return self._layout_of(value.operand, owner)
        if type(value) is not ast.Call or any(
            k.arg in ("dtype", "device", "out") for k in value.keywords
        ):
            return False
        name = self.analysis.call_name(value)
        short = name.rpartition(".")[2] if name else None
        args = [argument_value(a) for a in call_arguments(value)]
        numbers = all(is_number_literal(a) for a in args[1:])
        if name is not None and name.startswith("torch.") and args:
            if name in LIKE_FACTORIES or short in LAYOUT_KEEPING:
                return numbers and self._layout_of(args[0], owner)
            return False
        func = value.func
        if type(func) is ast.Attribute and func.attr in LAYOUT_KEEPING:
            return all(is_number_literal(a) for a in args) and self._layout_of(func.value, owner)
        return False

    def _same(self, a: ast.expr, b: ast.expr) -> bool:
        """The same code, as LibCST's ``deep_equals`` compares it (layout included)."""
        return self.text_of(a) == self.text_of(b)


def _is_compound(stmt: ast.stmt) -> bool:
    return not isinstance(
        stmt,
        (
            ast.Expr,
            ast.Assign,
            ast.AugAssign,
            ast.AnnAssign,
            ast.Return,
            ast.Delete,
            ast.Pass,
            ast.Break,
            ast.Continue,
            ast.Raise,
            ast.Assert,
            ast.Import,
            ast.ImportFrom,
            ast.Global,
            ast.Nonlocal,
            *((ast.TypeAlias,) if hasattr(ast, "TypeAlias") else ()),
        ),
    )


# -- fix builders: LibCST --------------------------------------------------------------------
def _statement_without(drops: set[ast.Attribute]) -> Rewrite:
    """The statement with ``.data`` dropped: ``w.data.normal_()`` -> ``w.normal_()``."""

    def rewrite(editor: Editor, small: cst.BaseSmallStatement) -> cst.BaseSmallStatement:
        return _drop_data(editor, small, drops)

    return rewrite


def _value_statement(drops: set[ast.Attribute]) -> Rewrite:
    """``w.data = w.data.normal_()`` -> ``w.normal_()``: the value alone, ``.data`` dropped."""

    def rewrite(editor: Editor, small: cst.BaseSmallStatement) -> cst.BaseSmallStatement:
        assert isinstance(small, cst.Assign)
        expr = cst.Expr(small.value, semicolon=small.semicolon)
        return _drop_data(editor, expr, drops)

    return rewrite


def _copy_statement(drops: set[ast.Attribute]) -> Rewrite:
    """``w.data = expr`` -> ``w.copy_(expr)``, ``.data`` of tensors dropped."""

    def rewrite(editor: Editor, small: cst.BaseSmallStatement) -> cst.BaseSmallStatement:
        assert isinstance(small, cst.Assign)
        data = small.targets[0].target
        assert isinstance(data, cst.Attribute)
        copy = cst.Call(cst.Attribute(data.value, cst.Name("copy_")), [cst.Arg(small.value)])
        return _drop_data(editor, cst.Expr(copy, semicolon=small.semicolon), drops)

    return rewrite


def _drop_data(
    editor: Editor, small: cst.BaseSmallStatement, drops: set[ast.Attribute]
) -> cst.BaseSmallStatement:
    tensors = {id(editor.node(data)) for data in drops}
    result = small.visit(_DropData(tensors))
    assert isinstance(result, cst.BaseSmallStatement)
    return result


def _detached_keeping_parentheses(editor: Editor, data: cst.CSTNode) -> cst.Call:
    """``(w.data)`` -> ``(w.detach())``."""
    assert isinstance(data, cst.Attribute)
    return cst.Call(cst.Attribute(data.value, cst.Name("detach")), lpar=data.lpar, rpar=data.rpar)


_RECONNECT = "Drop `.data`: a run showed it cuts the graph of weights that get no gradient"


def _detached(editor: Editor, data: cst.CSTNode) -> cst.Call:
    assert isinstance(data, cst.Attribute)
    return cst.Call(cst.Attribute(data.value, cst.Name("detach")))


@lazy_class
def _DropData() -> type:
    class DropData(cst.CSTTransformer):
        """``x.data`` -> ``x`` for the attribute nodes given by id."""

        def __init__(self, tensors: set[int]) -> None:
            super().__init__()
            self.tensors = tensors

        def leave_Attribute(
            self, original_node: cst.Attribute, updated_node: cst.Attribute
        ) -> cst.BaseExpression:
            if id(original_node) not in self.tensors:
                return updated_node
            return updated_node.value.with_changes(lpar=updated_node.lpar, rpar=updated_node.rpar)

    return DropData


def _data_attributes(node: ast.AST) -> list[ast.Attribute]:
    return [n for n in ast.walk(node) if type(n) is ast.Attribute and n.attr == "data"]


def _is_gradient(owner: ast.expr) -> bool:
    return type(owner) is ast.Attribute and owner.attr == GRADIENT


def _is_data_target(small: ast.Assign) -> bool:
    target = small.targets[0]
    return type(target) is ast.Attribute and target.attr == "data"


def _iterates_parameters(iterable: ast.expr, unpack_index: int | None) -> bool:
    if not (type(iterable) is ast.Call and type(iterable.func) is ast.Attribute):
        return False
    method = iterable.func.attr
    if method not in TENSOR_ITERATORS:
        return False
    return unpack_index == 1 if method.startswith("named_") else unpack_index is None


def _strip_subscripts(expr: ast.expr | None) -> ast.expr | None:
    while type(expr) is ast.Subscript:
        expr = expr.value
    return expr


def _is_int(expr: ast.expr, value: int) -> bool:
    return type(expr) is ast.Constant and type(expr.value) is int and expr.value == value


def _keyed_by_string(analysis: Semantic, owner: ast.expr) -> bool:
    """``owner.data["w"]``: a mapping's item (DGL's ``edges.data``), never ``Tensor.data``."""
    parent = analysis.parent(owner)
    data = parent if type(parent) is ast.Attribute and parent.attr == "data" else None
    holder = analysis.parent(data) if data is not None else None
    return (
        type(holder) is ast.Subscript
        and holder.value is data
        and type(holder.slice) is ast.Constant
        and type(holder.slice.value) is str
    )
