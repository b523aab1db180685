"""GF205 data-mutation."""

from __future__ import annotations

import libcst as cst

from gradfix.analysis import LAYER_PARAMETERS, VIEW_ATTRIBUTES, is_number_literal
from gradfix.inplace import changes_in_place
from gradfix.no_grad_block import (
    NoGradBlockRule,
    Site,
    inplace_target,
    used_in_graph_before,
)
from gradfix.rule import Edit, FixAvailability, FixSafety, Invalid, Valid
from gradfix.torch_facts import LIKE_FACTORIES, VIEW_OPS, is_inplace_method
from gradfix.walk import walk

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
    hides nothing there); inside a rewritten update it is simplified to `p.grad`.

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
    """

    code = "GF205"
    name = "data-mutation"
    message = "`.data` bypasses autograd's version check; use `torch.no_grad()` or `.detach()`"
    fix_safety = FixSafety.SAFE
    fix_availability = FixAvailability.SOMETIMES
    fix_safeties = (FixSafety.SAFE, FixSafety.UNSAFE)
    default_enabled = False
    prefilter = (".data",)

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
    def site(self, small: cst.BaseSmallStatement) -> Site | None:
        if self.analysis.in_no_grad(small):
            return None
        return self._mutation_site(small)

    def site_message(self, site: Site) -> str:
        owner = _code(site.target)
        if isinstance(site.statement, cst.Assign) and _is_data_target(site.statement):
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

    def _mutation_site(self, small: cst.BaseSmallStatement) -> Site | None:
        if isinstance(small, cst.Assign) and _is_data_target(small):
            return self._data_assignment_site(small)
        target = inplace_target(small)
        while isinstance(target, cst.Subscript):
            target = target.value
        if not (isinstance(target, cst.Attribute) and target.attr.value == "data"):
            return None
        owner = target.value
        if _is_gradient(owner) or not self._owns_tensor_data(owner, small, mutated=True):
            return None
        safety = self._mutation_safety(owner, small)
        return Site(small, owner, replacement=self._without_data(small, target), safety=safety)

    def _data_assignment_site(self, small: cst.Assign) -> Site | None:
        """``w.data = expr``: ``w.copy_(expr)`` when ``expr`` keeps the layout of ``w``."""
        data = small.targets[0].target
        assert isinstance(data, cst.Attribute)
        owner = data.value
        if _is_gradient(owner) or not self._owns_tensor_data(owner, small, mutated=False):
            return None
        site = Site(small, owner, safety=FixSafety.UNSAFE)
        value = small.value
        changed = _strip_subscripts(inplace_target(cst.Expr(value)))
        if isinstance(changed, cst.Attribute) and _same(changed, data):
            # ``w.data = w.data.normal_()``: the in-place call already did it all
            expr = cst.Expr(value, semicolon=small.semicolon)
            site.replacement = self._without_data(expr, changed)
            site.safety = self._mutation_safety(owner, small)
        elif len(small.targets) == 1 and self._keeps_layout(value, owner, small):
            copy = cst.Call(cst.Attribute(owner, cst.Name("copy_")), [cst.Arg(value)])
            site.replacement = self._without_data(cst.Expr(copy, semicolon=small.semicolon), data)
        else:
            site.fixable = False
        return site

    def _mutation_safety(self, owner: cst.BaseExpression, small: cst.CSTNode) -> FixSafety:
        function = self.analysis.enclosing_function(small)
        if function is not None and function.name.value == "forward":
            return FixSafety.UNSAFE
        if used_in_graph_before(self.analysis, owner, small):
            return FixSafety.UNSAFE
        return FixSafety.SAFE

    # -- mutations inside no_grad: drop .data --------------------------------------------------
    def visit_Expr(self, node: cst.Expr) -> None:
        self._check_mutation_in_no_grad(node)

    def visit_Assign(self, node: cst.Assign) -> None:
        self._check_mutation_in_no_grad(node)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        if changes_in_place(node):
            self._check_mutation_in_no_grad(node)

    def _check_mutation_in_no_grad(self, small: cst.BaseSmallStatement) -> None:
        if not self.analysis.in_no_grad(small):
            return
        site = self._mutation_site(small)
        if site is None:
            return
        fix = None
        if site.fixable and site.replacement is not None:
            safety = FixSafety.UNSAFE if site.safety is FixSafety.UNSAFE else None
            fix = self.fix([Edit(small, site.replacement)], "Drop `.data`", safety=safety)
        self.report(small, self.site_message(site), fix=fix)

    # -- reads -------------------------------------------------------------------------------
    def visit_Attribute(self, node: cst.Attribute) -> None:
        if node.attr.value != "data" or not self._is_load(node):
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
                    f"Mutation through `{_code(owner)}.data` inside an "
                    "expression skips autograd's version check",
                )
            return
        if context == "mutation-argument":
            if self._owns_tensor_data(owner, node, mutated=True):
                self._report_mutation_argument(node, owner)
            return
        if not self._owns_tensor_data(owner, node, mutated=False):
            return
        detached = cst.Call(
            cst.Attribute(owner, cst.Name("detach")), lpar=node.lpar, rpar=node.rpar
        )
        safety = FixSafety.SAFE if context == "copy" else FixSafety.UNSAFE
        message = f"`{_code(owner)}.data` reads `{_code(owner)}` past autograd; use `.detach()`"
        if safety is FixSafety.UNSAFE:
            message += " (unsafe: the result shares storage, and changes through it are checked)"
        fix = self.fix([Edit(node, detached)], "Use `.detach()`", safety=safety)
        self.report(node, message, fix=fix)

    def _report_mutation_argument(self, data: cst.Attribute, owner: cst.BaseExpression) -> None:
        """``nn.init.zeros_(w.data)``: torch's initialisers run under ``no_grad`` themselves,
        so ``.data`` is dropped; another function gets ``w.detach()``, which it can change
        in place too (unsafe: the change is then version-checked)."""
        call = next(a for a in self.analysis.ancestors(data) if isinstance(a, cst.Call))
        name = self.analysis.call_name(call) or ""
        message = (
            f"Mutation through `{_code(owner)}.data` by `{_code(call.func)}()` skips "
            "autograd's version check"
        )
        if name.startswith("torch.nn.init."):
            replacement = owner.with_changes(lpar=data.lpar, rpar=data.rpar)
            safety = self._mutation_safety(owner, data)
            fix = self.fix([Edit(data, replacement)], "Drop `.data`", safety=safety)
        else:
            detached = cst.Call(cst.Attribute(owner, cst.Name("detach")))
            fix = self.fix([Edit(data, detached)], "Use `.detach()`", safety=FixSafety.UNSAFE)
        self.report(data, message, fix=fix)

    def _is_load(self, node: cst.Attribute) -> bool:
        """Not a target: ``w.data = v``, ``w.data, meta = f()``, ``for w.data in ...``."""
        child: cst.CSTNode = node
        parent = self.analysis.parent(node)
        while isinstance(parent, (cst.Element, cst.StarredElement, cst.Tuple, cst.List)):
            child, parent = parent, self.analysis.parent(parent)
        if isinstance(parent, (cst.For, cst.CompFor)):
            return parent.target is not child
        if child is not node and not isinstance(parent, (cst.AssignTarget, cst.Del)):
            return True  # ``[w.data, 1]``: a read inside a display
        return not isinstance(parent, (cst.AssignTarget, cst.AugAssign, cst.Del))

    def _small_statement(self, node: cst.CSTNode) -> cst.BaseSmallStatement | None:
        for ancestor in self.analysis.ancestors(node):
            if isinstance(ancestor, cst.BaseSmallStatement):
                return ancestor
            if isinstance(ancestor, (cst.Lambda, cst.BaseCompoundStatement)):
                return None
        return None

    def _read_context(self, data: cst.BaseExpression) -> str:
        """'copy' when the value read through ``.data`` flows into a new tensor (or a
        number), 'alias' when a tensor sharing its storage escapes, 'mutation' when it is
        changed in place, 'metadata' when only its shape, dtype or device is asked for."""
        node: cst.CSTNode = data
        while True:
            parent = self.analysis.parent(node)
            if isinstance(parent, cst.Attribute) and parent.value is node:
                if parent.attr.value in METADATA:
                    return "metadata"
                if isinstance(self.analysis.parent(parent), cst.AssignTarget):
                    return "metadata"  # ``w.data[:2].requires_grad = False`` reads no value
                call = self.analysis.parent(parent)
                if isinstance(call, cst.Call) and call.func is parent:
                    method = parent.attr.value
                    if is_inplace_method(method):
                        return "mutation"
                    if method in ALIASING:
                        node = call
                        continue
                    return "copy"
                if parent.attr.value in VIEW_ATTRIBUTES:
                    node = parent
                    continue
                return "copy"
            if isinstance(parent, cst.Subscript) and parent.value is node:
                node = parent
                continue
            if isinstance(parent, (cst.BinaryOperation, cst.UnaryOperation, cst.Comparison)):
                return "copy"
            if isinstance(parent, cst.Element) and self._is_call_argument(parent):
                node = self.analysis.parent(parent)  # ``torch.cat([w.data, b.data])``
                continue
            if isinstance(parent, cst.Arg):
                call = self.analysis.parent(parent)
                if isinstance(call, cst.Call) and self._changes_arguments(call):
                    return "mutation-argument"  # ``nn.init.zeros_(w.data[0])``
                return (
                    "copy"
                    if isinstance(call, cst.Call) and self._reads_argument(call)
                    else ("alias")
                )
            return "alias"

    def _changes_arguments(self, call: cst.Call) -> bool:
        """An imported function named like an in-place op (``nn.init.normal_``,
        ``init.zeros_``) changes its argument; a method (``ema.copy_(p.data)``) reads it."""
        func = call.func
        name = self.analysis.call_name(call)
        if name is None and isinstance(func, cst.Name):
            name = func.value
        if name is None and isinstance(func, cst.Attribute) and self._is_module(func.value):
            name = func.attr.value  # ``from ... import initialization as init``
        return name is not None and is_inplace_method(name.rpartition(".")[2])

    def _is_module(self, expr: cst.BaseExpression) -> bool:
        """A name bound only by imports (relative imports leave no binding at all)."""
        return isinstance(expr, cst.Name) and all(
            b.kind == "import" for b in self.analysis.bindings(expr)
        )

    def _is_call_argument(self, element: cst.Element) -> bool:
        container = self.analysis.parent(element)
        return isinstance(container, (cst.List, cst.Tuple)) and isinstance(
            self.analysis.parent(container), cst.Arg
        )

    def _reads_argument(self, call: cst.Call) -> bool:
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
        if isinstance(func, cst.Name):
            return func.value in READING_BUILTINS
        # ``ema.copy_(p.data)``, ``acc.add(x.data)``: the argument is read, not kept
        return (
            isinstance(func, cst.Attribute)
            and func.attr.value not in ALIASING
            and (is_inplace_method(func.attr.value) or func.attr.value in LAYOUT_KEEPING)
        )

    # -- which ``.data`` belongs to a tensor ---------------------------------------------------
    def _owns_tensor_data(self, owner: cst.BaseExpression, at: cst.CSTNode, mutated: bool) -> bool:
        """``owner.data`` is ``Tensor.data`` (not a dataset's, a PackedSequence's, a card's)."""
        analysis = self.analysis
        if isinstance(owner, cst.Name) and owner.value == "self":
            return False
        if analysis.qualified_name(owner) is not None:
            return False  # ``torch.utils.data``
        if isinstance(owner, cst.Attribute) and owner.attr.value in TENSOR_ATTRIBUTES:
            return True
        if isinstance(owner, cst.Name) and self._iterates_tensors(owner, at):
            return True
        if analysis.is_tensor(owner, at) or analysis.requires_grad(owner, at):
            return True
        # ``obj.data.normal_(...)``: an in-place torch method on it says it is a tensor
        return mutated and isinstance(owner, (cst.Name, cst.Attribute, cst.Subscript))

    def _iterates_tensors(self, name: cst.Name, at: cst.CSTNode) -> bool:
        """``name`` is the loop variable of ``for p in model.parameters()`` (or of a
        ``zip`` of such iterators, as EMA code writes)."""
        binding = self.analysis.reaching_binding(name, at)
        if binding is None or binding.kind != "for" or binding.value is None:
            return False
        iterable = binding.value
        if isinstance(iterable, cst.Call) and isinstance(iterable.func, cst.Name):
            if iterable.func.value == "zip" and binding.unpack_index is not None:
                args = iterable.args
                return binding.unpack_index < len(args) and _iterates_parameters(
                    args[binding.unpack_index].value, None
                )
        return _iterates_parameters(iterable, binding.unpack_index) or (
            self.analysis.parameter_iterable(iterable) == "parameters"
            and binding.unpack_index is None
        )

    # -- rewriting ---------------------------------------------------------------------------
    def _without_data(
        self, small: cst.BaseSmallStatement, changed: cst.Attribute
    ) -> cst.BaseSmallStatement:
        """``small`` as it runs under ``no_grad``: ``changed`` (the ``x.data`` it modifies)
        and every other tensor's ``.data`` become plain names (the statement changes a
        tensor in place; what it reads is consumed, not kept)."""
        tensors = {
            id(data)
            for data in _data_attributes(small)
            if data is changed or self._owns_tensor_data(data.value, data, mutated=False)
        }
        result = small.visit(_DropData(tensors))
        assert isinstance(result, cst.BaseSmallStatement)
        return result

    def _keeps_layout(
        self, value: cst.BaseExpression, owner: cst.BaseExpression, at: cst.CSTNode
    ) -> bool:
        """``value`` has the shape and dtype of ``owner`` (a tensor that requires grad, so
        floating point: Python numbers do not change its dtype)."""
        analysis = self.analysis
        floating = (
            analysis.requires_grad(owner, at)
            or (isinstance(owner, cst.Attribute) and owner.attr.value in LAYER_PARAMETERS)
            or (isinstance(owner, cst.Name) and self._iterates_tensors(owner, at))
        )
        return floating and self._layout_of(value, owner)

    def _layout_of(self, value: cst.BaseExpression, owner: cst.BaseExpression) -> bool:
        if _same(value, owner) or (
            isinstance(value, cst.Attribute)
            and value.attr.value == "data"
            and _same(value.value, owner)
        ):
            return True
        if isinstance(value, cst.BinaryOperation):
            sides = [value.left, value.right]
            return any(self._layout_of(s, owner) for s in sides) and all(
                is_number_literal(s) or self._layout_of(s, owner) for s in sides
            )
        if isinstance(value, cst.UnaryOperation):
            return self._layout_of(value.expression, owner)
        if not isinstance(value, cst.Call) or any(
            a.keyword and a.keyword.value in ("dtype", "device", "out") for a in value.args
        ):
            return False
        name = self.analysis.call_name(value)
        short = name.rpartition(".")[2] if name else None
        numbers = all(is_number_literal(a.value) for a in value.args[1:])
        if name is not None and name.startswith("torch.") and value.args:
            first = value.args[0].value
            if name in LIKE_FACTORIES or short in LAYOUT_KEEPING:
                return numbers and self._layout_of(first, owner)
            return False
        func = value.func
        if isinstance(func, cst.Attribute) and func.attr.value in LAYOUT_KEEPING:
            return all(is_number_literal(a.value) for a in value.args) and self._layout_of(
                func.value, owner
            )
        return False


class _DropData(cst.CSTTransformer):
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


def _data_attributes(node: cst.CSTNode) -> list[cst.Attribute]:
    found: list[cst.Attribute] = []

    class Collect(cst.CSTVisitor):
        def visit_Attribute(self, attr: cst.Attribute) -> None:
            if attr.attr.value == "data":
                found.append(attr)

    walk(node, Collect())
    return found


def _is_gradient(owner: cst.BaseExpression) -> bool:
    return isinstance(owner, cst.Attribute) and owner.attr.value == GRADIENT


def _is_data_target(small: cst.Assign) -> bool:
    target = small.targets[0].target
    return isinstance(target, cst.Attribute) and target.attr.value == "data"


def _iterates_parameters(iterable: cst.BaseExpression, unpack_index: int | None) -> bool:
    if not (isinstance(iterable, cst.Call) and isinstance(iterable.func, cst.Attribute)):
        return False
    method = iterable.func.attr.value
    if method not in TENSOR_ITERATORS:
        return False
    return unpack_index == 1 if method.startswith("named_") else unpack_index is None


def _strip_subscripts(expr: cst.BaseExpression | None) -> cst.BaseExpression | None:
    while isinstance(expr, cst.Subscript):
        expr = expr.value
    return expr


def _same(a: cst.BaseExpression | None, b: cst.BaseExpression) -> bool:
    return a is not None and a.deep_equals(b)


def _code(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node)
