"""GF204 inplace-on-saved."""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from gradfix.analysis import (
    SAVES_OUTPUT,
    TENSOR_OPS,
    Binding,
    argument,
    is_number_literal,
)
from gradfix.inplace import (
    NameIndex,
    changes_in_place,
    classify_read,
    in_autograd_function,
    in_eval_only_branch,
    inplace_flag,
    inplace_function,
    is_constant,
    is_inplace_call,
    reads_of,
    small_statement,
)
from gradfix.rule import (
    INDEX_ASSIGNMENT,
    Edit,
    Fix,
    FixAvailability,
    FixSafety,
    Invalid,
    Rule,
    RuleContext,
    Valid,
)
from gradfix.torch_facts import (
    AUGMENTED_ASSIGNMENTS,
    FACTORIES,
    INPLACE_FLAG_POSITIONS,
    MAY_ALIAS_OPS,
    is_inplace_method,
)
from gradfix.walk import walk

#: In-place methods whose out-of-place twin takes the same arguments (``h.mul_(2)`` ->
#: ``h = h.mul(2)``). Others (``fill_``, ``copy_``, ``zero_``...) get ``h = h.clone()``.
TWIN_METHODS = frozenset(
    "add sub subtract mul multiply div divide true_divide floor_divide pow clamp clamp_min "
    "clamp_max clip masked_fill masked_scatter index_fill index_add index_copy scatter "
    "scatter_add addcmul addcdiv lerp neg abs exp log log1p sigmoid tanh relu sqrt rsqrt "
    "reciprocal floor ceil round trunc sign fmod remainder square sin cos nan_to_num".split()
)
#: Twins whose result has the receiver's dtype whatever the other arguments are.
DTYPE_KEEPING_METHODS = frozenset("masked_fill index_fill".split())
#: ``nn`` activation modules that save their output, by the op they apply.
OUTPUT_SAVING_MODULES = {
    "Sigmoid": "sigmoid", "Tanh": "tanh", "ReLU": "relu", "Softmax": "softmax",
    "LogSoftmax": "log_softmax", "Softmin": "softmin",
}  # fmt: skip
#: ``nn`` modules with an ``inplace`` flag, and its position in the constructor.
INPLACE_MODULES = {
    "ReLU": 0, "ReLU6": 0, "SELU": 0, "SiLU": 0, "Mish": 0, "Hardsigmoid": 0,
    "Hardswish": 0, "ELU": 1, "CELU": 1, "LeakyReLU": 1, "Dropout": 1, "Dropout1d": 1,
    "Dropout2d": 1, "Dropout3d": 1, "AlphaDropout": 1, "FeatureAlphaDropout": 1,
    "Hardtanh": 2, "Threshold": 2, "RReLU": 2,
}  # fmt: skip
#: ``nn`` layers that save their input for the gradient of their weight.
INPUT_SAVING_MODULES = frozenset(
    "Linear Bilinear Conv1d Conv2d Conv3d ConvTranspose1d ConvTranspose2d ConvTranspose3d "
    "LayerNorm GroupNorm BatchNorm1d BatchNorm2d BatchNorm3d InstanceNorm1d InstanceNorm2d "
    "InstanceNorm3d".split()
)
_AUGMENTED: dict[type[cst.BaseAugOp], cst.BaseBinaryOp] = {
    cst.AddAssign: cst.Add(), cst.SubtractAssign: cst.Subtract(),
    cst.MultiplyAssign: cst.Multiply(), cst.DivideAssign: cst.Divide(),
    cst.FloorDivideAssign: cst.FloorDivide(), cst.ModuloAssign: cst.Modulo(),
    cst.PowerAssign: cst.Power(), cst.MatrixMultiplyAssign: cst.MatrixMultiply(),
}  # fmt: skip
#: Operators binding tighter than each operator (no parentheses needed on the right).
_TIGHTER: dict[type[cst.BaseBinaryOp], tuple[type[cst.BaseBinaryOp], ...]] = {
    cst.Add: (cst.Multiply, cst.Divide, cst.FloorDivide, cst.Modulo, cst.MatrixMultiply,
              cst.Power),
    cst.Subtract: (cst.Multiply, cst.Divide, cst.FloorDivide, cst.Modulo, cst.MatrixMultiply,
                   cst.Power),
    cst.Multiply: (cst.Power,), cst.Divide: (cst.Power,), cst.FloorDivide: (cst.Power,),
    cst.Modulo: (cst.Power,), cst.MatrixMultiply: (cst.Power,), cst.Power: (),
}  # fmt: skip


@dataclass
class Mutation:
    """One in-place change of the tensor bound to ``name``."""

    statement: cst.BaseSmallStatement
    node: cst.CSTNode  # reported
    name: cst.Name
    form: str  # augassign | method | index | function
    call: cst.Call | None = None


@dataclass
class Saver:
    """The op that saved the tensor for backward."""

    node: cst.CSTNode
    statement: cst.CSTNode
    description: str
    output: bool  # it saved its result (else: its operand)


class InplaceOnSaved(Rule):
    """
    ## What it does
    Finds in-place changes (`h += 1`, `h.mul_(2)`, `h[0] = v`, `h.clamp_(0, 1)`,
    `F.relu(h, inplace=True)`, `F.relu_(h)`) of a tensor that an earlier recorded op saved
    for backward: the output of `sigmoid`, `tanh`, `exp`, `relu`, `softmax`, `sqrt`,
    `rsqrt`, `reciprocal`, `x ** y`..., or an operand of `matmul`, `mul`, `div`, `pow`,
    `log`, a `Linear` or `Conv` layer... while a later backward still needs that graph.
    Rewrites the change out of place.

    ## Why is this bad?
    Autograd keeps the tensors an op needs for its backward and checks their version
    counter there. The in-place change bumps it, and `backward()` fails with "one of the
    variables needed for gradient computation has been modified by an inplace operation:
    [torch.FloatTensor [2, 1]], which is output 0 of ...; is at version 1; expected version
    0 instead." Ops that save nothing of the tensor are fine: `h = x @ w; h += 1`
    (matmul saves its inputs, not its output), `h = x + 1; h *= 2` (add saves nothing),
    `y = x * 2; y += 1` (multiplying by a constant saves only the constant). A change
    under `torch.no_grad()` is no exception: it bumps the counter too.

    ## Example
    ```python
    d = torch.matmul(x, w1)
    f = torch.matmul(d, w2)  # saves d for the gradient of w2
    d[:] = 1
    f.backward()  # RuntimeError: ... modified by an inplace operation

    h = torch.sigmoid(x @ w)  # saves its output h
    h += 1
    h.mul_(2)
    ```

    ## Use instead
    ```python
    d = torch.matmul(x, w1)
    f = torch.matmul(d, w2)
    d = d.clone()
    d[:] = 1
    f.backward()

    h = torch.sigmoid(x @ w)
    h = h + 1
    h = h.mul(2)
    ```
    `F.relu(h, inplace=True)` becomes `F.relu(h)`, `F.relu_(h)` becomes `h = F.relu(h)`,
    `nn.ReLU(inplace=True)` (in an `nn.Sequential` after `nn.Sigmoid()`/`nn.Tanh()`/
    `nn.Softmax()`..., or a module attribute applied to a saved tensor) becomes `nn.ReLU()`.
    Index assignments and in-place methods without an out-of-place twin (`fill_`,
    `copy_`, `zero_`) change a copy: `h = h.clone()` goes right before them.

    ## Fix safety
    The rewrite rebinds the name to a new tensor instead of changing the shared one, so
    it is offered only when the name is bound in the same scope to a fresh result (not a
    parameter of the function, not a view of another tensor) and no other name, view or
    container holding the tensor is read after the change; otherwise the finding is
    reported without a fix. The fix is safe when the values keep their dtype: number
    operands (`h += 1`, `h.clamp_(0, 1)`, `h.masked_fill_(m, 0.0)`), `h = h.clone()`
    before an index assignment or a change through a view (`h[0].zero_()`), dropping
    `inplace=True`. It is unsafe with a tensor operand (`h += bias`): `h + bias` may
    promote the dtype where `h += bias` kept it. `inplace=True` is dropped from a module
    attribute only when the module is used once, on this tensor (other call sites may
    rely on the in-place change). Changes under `no_grad()` are reported without a fix:
    out of place they would cut the graph. Ops recorded under `no_grad()`, tensors that
    do not require grad, a backward call between the op and the change, eval-only
    branches (`if not self.training:`), the inside of a custom `torch.autograd.Function`
    and leaves (GF201) are not reported.
    """

    code = "GF204"
    name = "inplace-on-saved"
    message = (
        "In-place change of a tensor saved for backward: backward fails with "
        "'modified by an inplace operation'"
    )
    fix_safety = FixSafety.SAFE
    fix_availability = FixAvailability.SOMETIMES
    fix_safeties = (FixSafety.SAFE, FixSafety.UNSAFE)
    prefilter = ("_(", *AUGMENTED_ASSIGNMENTS, INDEX_ASSIGNMENT, "inplace")

    def __init__(self, context: RuleContext) -> None:
        super().__init__(context)
        self.names = NameIndex()

    VALID = [
        Valid(
            """
            import torch

            def drop_block(x, with_noise):
                with torch.no_grad():
                    keep_mask = 1.0 - torch.rand_like(x)
                if with_noise:
                    x = x * keep_mask
                else:
                    with torch.no_grad():
                        keep_mask.mul_(2.0)  # the other branch's product never ran
                    x = x * keep_mask
                return x

            w = torch.randn(4, requires_grad=True)
            drop_block(w * 1, True).sum().backward()
            """
        ),
        Valid(
            """
            import torch
            x = torch.randn(2, 3)
            w = torch.randn(3, 4, requires_grad=True)
            h = x @ w
            h += 1  # matmul saves its inputs, not its output
            g = x + w.sum()
            g *= 2  # add saves nothing
            y = h * 2
            y += 1  # mul by a constant saves only the constant
            (h.sum() + g.sum() + y.sum()).backward()
            """
        ),
        Valid(
            """
            import torch
            w = torch.randn(3, requires_grad=True)
            with torch.no_grad():
                h = torch.sigmoid(w)
                h += 1
            fresh = torch.zeros(3)
            fresh.add_(1)
            (h * w + fresh).sum().backward()
            """
        ),
        Valid(
            """
            import torch
            from torch import nn

            class Head(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.fc = nn.Linear(4, 4)

                def forward(self, x):
                    y = self.fc(x).sigmoid()
                    if not self.training:
                        y[..., :2] = y[..., :2] * 2  # inference only
                    return y
            """
        ),
        Valid(
            """
            import torch
            w = torch.randn(3, requires_grad=True)
            h = torch.exp(w)
            h.sum().backward()
            h += 1  # the graph is gone already
            print(h)
            """
        ),
        Valid(
            """
            import torch
            import torch.nn.functional as F
            w = torch.randn(3, 3, requires_grad=True)
            h = F.linear(torch.randn(2, 3), w)
            h = F.relu(h, inplace=True)  # linear does not save its output
            h.sum().backward()
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            x = torch.FloatTensor([[1., 2.]])
            w1 = torch.FloatTensor([[2.], [1.]])
            w2 = torch.FloatTensor([3.])
            w1.requires_grad = True
            w2.requires_grad = True

            d = torch.matmul(x, w1)
            f = torch.matmul(d, w2)
            d[:] = 1
            f.backward()
            """,
            """
            import torch
            x = torch.FloatTensor([[1., 2.]])
            w1 = torch.FloatTensor([[2.], [1.]])
            w2 = torch.FloatTensor([3.])
            w1.requires_grad = True
            w2.requires_grad = True

            d = torch.matmul(x, w1)
            f = torch.matmul(d, w2)
            d = d.clone()
            d[:] = 1
            f.backward()
            """,
        ),
        Invalid(
            """
            import torch as th
            import torch.nn.functional as F

            def gate(x, w):
                h = th.sigmoid(x @ w)
                h *= 2  # scale
                h.clamp_(max=1.5)
                F.relu_(h)
                return h

            gate(th.randn(2, 3), th.randn(3, 1, requires_grad=True))
            """,
            """
            import torch as th
            import torch.nn.functional as F

            def gate(x, w):
                h = th.sigmoid(x @ w)
                h = h * 2  # scale
                h = h.clamp(max=1.5)
                h = F.relu(h)
                return h

            gate(th.randn(2, 3), th.randn(3, 1, requires_grad=True))
            """,
        ),
        Invalid(
            """
            import torch
            from torch.nn import functional as F
            w = torch.randn(3, requires_grad=True)
            e = w.exp()
            F.relu_(e)
            out = F.relu(torch.sigmoid(w), inplace=True)
            (e + out).sum().backward()
            """,
            """
            import torch
            from torch.nn import functional as F
            w = torch.randn(3, requires_grad=True)
            e = w.exp()
            e = F.relu(e)
            out = F.relu(torch.sigmoid(w), inplace=True)
            (e + out).sum().backward()
            """,
        ),
        Invalid(
            """
            import torch
            w = torch.randn(3, requires_grad=True)
            h = torch.tanh(w)
            view = h[:2]
            h += 1
            print(view)
            h.sum().backward()
            """,
            report_only=True,
        ),
        Invalid(
            """
            import torch
            w = torch.randn(3, requires_grad=True)
            p = torch.softmax(w, 0)
            with torch.no_grad():
                p.clamp_(min=1e-6)
            torch.log(p).sum().backward()
            """,
            report_only=True,
        ),
        Invalid(
            """
            import torch
            w = torch.randn(3, requires_grad=True)
            h = torch.sigmoid(w)
            h += w  # unsafe: `h = h + w` may change the dtype or shape of `h`
            h.sum().backward()
            """,
            """
            import torch
            w = torch.randn(3, requires_grad=True)
            h = torch.sigmoid(w)
            h = h + w  # unsafe: `h = h + w` may change the dtype or shape of `h`
            h.sum().backward()
            """,
        ),
    ]

    # -- collecting mutations ----------------------------------------------------------------
    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        target = node.target
        if not changes_in_place(node):
            return
        if isinstance(target, cst.Name):
            self._check(Mutation(node, node, target, "augassign"))
        elif isinstance(target, cst.Subscript):
            base = _base_name(target)
            if base is not None:
                self._check(Mutation(node, node, base, "index"))

    def visit_Assign(self, node: cst.Assign) -> None:
        if len(node.targets) != 1 or not isinstance(node.targets[0].target, cst.Subscript):
            return
        base = _base_name(node.targets[0].target)
        if base is not None:
            self._check(Mutation(node, node, base, "index"))

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        statement = small_statement(self.analysis, node)
        if statement is None:
            return
        if self.analysis.call_name(node) == "torch.nn.Sequential":
            self._check_sequential(node)
            return
        form = "function" if inplace_function(self.analysis, node) is not None else None
        if form is None and node.args and self._inplace_module(func):
            form = "module"
        if form is not None:
            base = _base_name(node.args[0].value)
            if base is not None:
                self._check(Mutation(statement, node, base, form, node))
            return
        if not isinstance(func, cst.Attribute) or not is_inplace_method(func.attr.value):
            return
        if self.analysis.qualified_name(func) is not None:
            return  # a module function (``torch.manual_seed``...), not a tensor method
        receiver = func.value
        if is_inplace_call(receiver):
            return  # ``h.mul_(2).add_(1)``: reported at the innermost call
        base = _base_name(receiver)
        if base is not None:
            self._check(Mutation(statement, node, base, "method", node))

    # -- deciding ----------------------------------------------------------------------------
    def _check(self, mutation: Mutation) -> None:
        analysis = self.analysis
        name, statement = mutation.name, mutation.statement
        if analysis.leaf_reason(name, statement) is not None:
            return  # raises at once: GF201 leaf-inplace
        binding = analysis.reaching_binding(name, statement)
        if binding is None or in_eval_only_branch(analysis, statement):
            return
        if in_autograd_function(analysis, statement):
            return  # autograd records nothing inside a custom Function
        if analysis.scope_of(binding.node).node is not analysis.scope_of(statement).node:
            return
        saver = self._saver(name, binding, statement)
        if saver is None or not self._graph_needed(saver, mutation):
            return
        self.report(mutation.node, self._message(mutation, saver), fix=self._fix(mutation, binding))

    def _saver(self, name: cst.Name, binding: Binding, statement: cst.CSTNode) -> Saver | None:
        """The recorded op that saved the tensor ``name`` holds at ``statement``."""
        analysis = self.analysis
        value = binding.value
        if binding.kind == "assign" and value is not None and binding.unpack_index is None:
            op = self._output_saving_op(value, binding.node)
            if op is not None and self._recorded(value, binding.node):
                return Saver(value, binding.node, f"`{op}` saved its output", True)
        scope = analysis.scope_of(statement).node
        end = analysis.index(statement)
        for read in reads_of(analysis, self.names, binding, scope, binding.end, end):
            if analysis.in_exclusive_branches(read, statement):
                continue  # `if a: x * m` then `else: m.mul_(s)`: the save never happened
            saver = self._saving_use(read)
            if saver is not None:
                return saver
        return None

    def _saving_use(self, name: cst.Name) -> Saver | None:
        """The op at this read of the tensor saves it: an output-saving in-place op
        (``h.sigmoid_()``) or an op that saves this operand (``h @ w``)."""
        analysis = self.analysis
        read = classify_read(analysis, name)
        statement = small_statement(self.analysis, name)
        if statement is None:
            return None
        if read.kind == "mutation" and read.method is not None and read.top is name:
            op = read.method[:-1]
            call = analysis.parent(analysis.parent(name) or name)
            if op in SAVES_OUTPUT and isinstance(call, cst.Call) and self._recorded(call, call):
                return Saver(call, statement, f"`{read.method}` saved its output", True)
            return None
        if read.kind != "fresh":
            return None
        op_node = _operation(analysis, read.top)
        if op_node is None or not self._recorded(op_node, op_node):
            return None
        layer = self._module_class(op_node.func) if isinstance(op_node, cst.Call) else None
        if layer in INPUT_SAVING_MODULES:
            return Saver(op_node, statement, f"`nn.{layer}` saved it", False)
        saved = analysis.saved_operands(op_node, op_node) or []
        if any(operand is read.top for operand in saved):
            op = analysis.tensor_op(op_node, op_node)
            label = op[0] if op is not None else "the op"
            return Saver(op_node, statement, f"`{label}` saved it", False)
        return None

    def _recorded(self, op: cst.BaseExpression, at: cst.CSTNode) -> bool:
        analysis = self.analysis
        return not analysis.in_no_grad(at) and analysis.requires_grad(op, at)

    def _output_saving_op(self, value: cst.BaseExpression, at: cst.CSTNode) -> str | None:
        """The name of the op ``value`` applies when that op saves its result."""
        analysis = self.analysis
        op = analysis.tensor_op(value, at)
        if op is not None:
            name, operands = op
            if name in SAVES_OUTPUT or (name == "pow" and _tensor_exponent(self, operands, at)):
                return name
        if isinstance(value, cst.Call):
            layer = self._module_class(value.func)
            if layer in OUTPUT_SAVING_MODULES:
                return f"nn.{layer}"
        return None

    def _module_class(self, func: cst.BaseExpression) -> str | None:
        """``nn.Linear`` for ``self.fc`` / ``fc`` / ``nn.Linear(3, 4)`` called as a function."""
        constructor = self._constructor(func)
        name = self.analysis.call_name(constructor) if constructor is not None else None
        if name is None or not name.startswith("torch.nn."):
            return None
        return name.rpartition(".")[2]

    def _constructor(self, func: cst.BaseExpression) -> cst.Call | None:
        analysis = self.analysis
        if isinstance(func, cst.Call):
            return func
        values: list[cst.BaseExpression] = []
        if isinstance(func, cst.Name):
            binding = analysis.reaching_binding(func, func)
            if binding is not None and binding.kind == "assign" and binding.value is not None:
                values = [binding.value]
        elif isinstance(func, cst.Attribute):
            values = [v for v, _ in analysis.self_attribute_values(func, func)]
        calls = [v for v in values if isinstance(v, cst.Call)]
        return calls[0] if len(calls) == 1 and len(values) == 1 else None

    def _inplace_module(self, func: cst.BaseExpression) -> bool:
        """``func`` is an ``nn`` activation module built with ``inplace=True``."""
        return self._inplace_module_flag(func) is not None

    def _inplace_module_flag(self, func: cst.BaseExpression) -> cst.Arg | None:
        constructor = self._constructor(func)
        layer = self._module_class(func)
        position = INPLACE_MODULES.get(layer or "")
        if constructor is None or position is None:
            return None
        flag = argument(constructor, "inplace", position)
        is_true = flag is not None and isinstance(flag.value, cst.Name)
        return flag if is_true and flag.value.value == "True" else None  # type: ignore[union-attr]

    def _check_sequential(self, call: cst.Call) -> None:
        """``nn.Sequential(nn.Linear(...), nn.Sigmoid(), nn.ReLU(inplace=True))``."""
        if self.analysis.in_no_grad(call):
            return
        layers = [a.value for a in call.args if a.keyword is None and not a.star]
        recorded = False
        for previous, layer in zip(layers, layers[1:]):
            recorded = recorded or self.analysis.is_nn_layer(previous, call)
            saver = self._module_class(previous)
            flag = self._inplace_module_flag(layer)
            if not recorded or saver not in OUTPUT_SAVING_MODULES or flag is None:
                continue
            assert isinstance(layer, cst.Call)
            message = (
                f"`nn.{self._module_class(layer)}(inplace=True)` changes the output of "
                f"`nn.{saver}` in place, but `{OUTPUT_SAVING_MODULES[saver]}` saved it for "
                "backward: backward fails with 'modified by an inplace operation'; drop "
                "`inplace=True`"
            )
            self.report(layer, message, fix=self._drop_flag(layer, flag))

    def _drop_flag(self, constructor: cst.Call, flag: cst.Arg) -> Fix:
        args = [a for a in constructor.args if a is not flag]
        if args:
            args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        return self.fix(
            [Edit(constructor, constructor.with_changes(args=args))], "Drop `inplace=True`"
        )

    def _graph_needed(self, saver: Saver, mutation: Mutation) -> bool:
        """A backward may still run through the saving op after the change: a name that
        holds the graph (the saver's result, what was computed from it, the changed tensor
        itself when the op saved its output) is used after the change."""
        analysis = self.analysis
        scope = analysis.scope_of(mutation.statement).node
        start = analysis.end_index(saver.statement)
        end = analysis.index(mutation.statement)
        if any(start < analysis.index(call) < end for call in _backward_calls(scope)):
            return False
        holders = set(_bound_names(saver.statement))
        if saver.output:
            holders.add(mutation.name.value)
        for name in self.names.all(scope):
            if name.value in holders and start < analysis.index(name) < end:
                derived = self._derived_holders(name)
                if derived is None:
                    return True  # stored somewhere we cannot follow
                holders |= derived
        if mutation.call is not None and not isinstance(mutation.statement, cst.Expr):
            if isinstance(mutation.statement, (cst.Return, cst.AugAssign)):
                return True
            holders |= set(_bound_names(mutation.statement))
        after = analysis.end_index(mutation.statement)
        return any(
            name.value in holders
            and analysis.index(name) > after
            and classify_read(analysis, name).kind != "nongraph"
            for name in self.names.all(scope)
        )

    def _derived_holders(self, name: cst.Name) -> set[str] | None:
        """Names that hold what the statement around this read computes from it;
        None when the result goes somewhere else (an attribute, a container, a return)."""
        analysis = self.analysis
        read = classify_read(analysis, name)
        if read.kind == "nongraph":
            return set()
        statement = small_statement(self.analysis, name)
        if isinstance(statement, (cst.Assign, cst.AugAssign, cst.AnnAssign)):
            bound = _bound_names(statement)
            targets = statement.targets if isinstance(statement, cst.Assign) else []
            if any(not isinstance(t.target, (cst.Name, cst.Tuple)) for t in targets):
                return None
            return set(bound)
        if isinstance(statement, cst.Expr) and isinstance(statement.value, cst.Call):
            func = statement.value.func
            if read.kind == "mutation":
                return set()
            if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name):
                return {func.value.value}  # ``losses.append(loss)``
            return set()
        return None

    def _message(self, mutation: Mutation, saver: Saver) -> str:
        line = self.context.position(saver.node).start.line
        code = " ".join(cst.Module([]).code_for_node(mutation.statement).split())
        if len(code) > 40:
            code = code[:37] + "..."
        return (
            f"`{code}` changes `{mutation.name.value}` in place, but {saver.description} "
            f"for backward (line {line}): backward fails with 'modified by an inplace "
            "operation'; use the out-of-place form"
        )

    # -- fixing ------------------------------------------------------------------------------
    def _fix(self, mutation: Mutation, binding: Binding) -> Fix | None:
        if self.analysis.in_no_grad(mutation.statement):
            return None  # out of place under no_grad would cut the graph
        if not self._rebindable(mutation, binding):
            return None
        if mutation.form == "augassign":
            return self._augassign_fix(mutation)
        if mutation.form == "function":
            return self._function_fix(mutation)
        if mutation.form == "module":
            return self._module_fix(mutation)
        if mutation.form == "method":
            twin = self._twin_fix(mutation)
            if twin is not None:
                return twin
        if isinstance(mutation.statement, (cst.Assign, cst.AugAssign, cst.Expr)):
            return self._clone_fix(mutation)
        return None

    def _rebindable(self, mutation: Mutation, binding: Binding) -> bool:
        """Rebinding the name keeps forward results: it holds a fresh tensor bound in this
        scope, and no alias of it (another name, a view, a container) is read later."""
        analysis = self.analysis
        if binding.kind != "assign" or binding.value is None or binding.unpack_index is not None:
            return False
        if not self._is_fresh(binding.value, binding.node):
            return False
        scope = analysis.scope_of(mutation.statement).node
        end = analysis.index(mutation.statement)
        after = analysis.end_index(mutation.statement)
        loop = _loop_without(analysis, mutation.statement, binding.node)
        if loop is not None:  # the next iteration comes after the change too
            end, after = analysis.end_index(loop), analysis.index(loop)
        aliases: set[str] = set()
        for read in reads_of(analysis, self.names, binding, scope, binding.end, end):
            use = classify_read(analysis, read)
            if use.kind == "escape":
                return False
            if use.kind == "alias":
                aliases |= {a.value for a in use.aliases if a.value != binding.name}
        return not any(
            analysis.index(n) > after for alias in aliases for n in self.names.named(scope, alias)
        )

    def _is_fresh(self, value: cst.BaseExpression, at: cst.CSTNode) -> bool:
        """``value`` makes a new tensor, not a view or an alias of another one."""
        analysis = self.analysis
        if isinstance(value, cst.Call) and (
            analysis.call_name(value) in FACTORIES or analysis.is_nn_layer(value.func, at)
        ):
            return True
        if isinstance(value, cst.Call) and self._module_class(value.func) in OUTPUT_SAVING_MODULES:
            return not self._inplace_module(value.func)
        op = analysis.tensor_op(value, at)
        if op is None or op[0] not in TENSOR_OPS or op[0] in MAY_ALIAS_OPS:
            return False
        return not (isinstance(value, cst.Call) and inplace_function(analysis, value))

    def _augassign_fix(self, mutation: Mutation) -> Fix | None:
        statement = mutation.statement
        assert isinstance(statement, cst.AugAssign)
        operator = _AUGMENTED.get(type(statement.operator))
        if operator is None:
            return None
        value = _operand(statement.value, operator)
        target = mutation.name
        new = cst.Assign(
            targets=[cst.AssignTarget(cst.Name(target.value))],
            value=cst.BinaryOperation(cst.Name(target.value), operator, value),
            semicolon=statement.semicolon,
        )
        safety = None if is_constant(self.analysis, statement.value) else FixSafety.UNSAFE
        description = f"Write `{target.value} = {target.value} {_symbol(operator)} ...`"
        return self.fix([Edit(statement, new)], description, safety=safety)

    def _twin_fix(self, mutation: Mutation) -> Fix | None:
        """``h.mul_(2).add_(1)`` as a statement -> ``h = h.mul(2).add(1)``."""
        statement = mutation.statement
        if not isinstance(statement, cst.Expr):
            return None
        chain: list[cst.Call] = []
        expr = statement.value
        while isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute):
            if not is_inplace_method(expr.func.attr.value):
                return None
            chain.append(expr)
            expr = expr.func.value
        if expr is not mutation.name or not chain:
            return None
        if any(c.func.attr.value[:-1] not in TWIN_METHODS for c in chain):  # type: ignore[attr-defined]
            return None
        new_value = statement.value.visit(_StripUnderscores(chain))
        assert isinstance(new_value, cst.BaseExpression)
        new = cst.Assign(
            targets=[cst.AssignTarget(cst.Name(mutation.name.value))],
            value=new_value,
            semicolon=statement.semicolon,
        )
        keeps_dtype = all(self._keeps_dtype(c) for c in chain)
        methods = ", ".join(f"`{c.func.attr.value[:-1]}`" for c in chain)  # type: ignore[attr-defined]
        return self.fix(
            [Edit(statement, new)],
            f"Use the out-of-place {methods} and rebind `{mutation.name.value}`",
            safety=None if keeps_dtype else FixSafety.UNSAFE,
        )

    def _keeps_dtype(self, call: cst.Call) -> bool:
        method = call.func.attr.value[:-1]  # type: ignore[attr-defined]
        if method in DTYPE_KEEPING_METHODS:
            return True
        return all(is_constant(self.analysis, arg.value) for arg in call.args)

    def _function_fix(self, mutation: Mutation) -> Fix | None:
        """``F.relu_(h)`` -> ``h = F.relu(h)``; ``F.relu(h, inplace=True)`` -> ``F.relu(h)``."""
        call, statement = mutation.call, mutation.statement
        assert call is not None
        if call.args[0].value is not mutation.name:
            return None
        new_call = _out_of_place_call(self.analysis, call)
        if new_call is None:
            return None
        name = mutation.name.value
        if isinstance(statement, cst.Expr) and statement.value is call:
            new: cst.BaseSmallStatement = cst.Assign(
                targets=[cst.AssignTarget(cst.Name(name))],
                value=new_call,
                semicolon=statement.semicolon,
            )
            return self.fix([Edit(statement, new)], f"Call it out of place and rebind `{name}`")
        if not isinstance(statement, (cst.Assign, cst.Return)) or statement.value is not call:
            return None
        targets = _bound_names(statement)
        if name not in targets and self._read_after(mutation):
            return None  # the caller relies on ``h`` being changed too
        return self.fix([Edit(call, new_call)], "Call it out of place")

    def _module_fix(self, mutation: Mutation) -> Fix | None:
        """``self.act = nn.ReLU(inplace=True)`` used once, on this tensor: drop the flag."""
        call, statement = mutation.call, mutation.statement
        assert call is not None
        flag = self._inplace_module_flag(call.func)
        constructor = self._constructor(call.func)
        if flag is None or constructor is None or self._module_uses(call.func) != 1:
            return None
        if call.args[0].value is not mutation.name:
            return None
        if not isinstance(statement, (cst.Assign, cst.Return)) or statement.value is not call:
            return None
        if mutation.name.value not in _bound_names(statement) and self._read_after(mutation):
            return None
        return self._drop_flag(constructor, flag)

    def _module_uses(self, func: cst.BaseExpression) -> int:
        """How often the module object ``func`` names is used (``self.act`` in its class,
        a local name in its scope)."""
        analysis = self.analysis
        if isinstance(func, cst.Name):
            scope = analysis.scope_of(func).node
            return sum(
                1 for n in self.names.named(scope, func.value) if not _is_assigned(analysis, n)
            )
        cls = analysis.enclosing_class(func)
        if not isinstance(func, cst.Attribute) or cls is None:
            return 0
        finder = _AttributeUses(func.attr.value)
        walk(cls, finder)
        return finder.count

    def _read_after(self, mutation: Mutation) -> bool:
        analysis = self.analysis
        scope = analysis.scope_of(mutation.statement).node
        after = analysis.end_index(mutation.statement)
        return any(analysis.index(n) > after for n in self.names.named(scope, mutation.name.value))

    def _clone_fix(self, mutation: Mutation) -> Fix | None:
        """``h = h.clone()`` on its own line before the change."""
        line = self.analysis.parent(mutation.statement)
        if not isinstance(line, cst.SimpleStatementLine) or len(line.body) != 1:
            return None
        if not isinstance(self.analysis.parent(line), (cst.IndentedBlock, cst.Module)):
            return None
        name = mutation.name.value
        clone = cst.SimpleStatementLine(
            [
                cst.Assign(
                    targets=[cst.AssignTarget(cst.Name(name))],
                    value=cst.Call(cst.Attribute(cst.Name(name), cst.Name("clone"))),
                )
            ],
            leading_lines=line.leading_lines,
        )
        replacement = cst.FlattenSentinel([clone, line.with_changes(leading_lines=())])
        return self.fix(
            [Edit(line, replacement)], f"Change a copy: `{name} = {name}.clone()` before it"
        )


# -- helpers -----------------------------------------------------------------------------------
def _base_name(expr: cst.BaseExpression) -> cst.Name | None:
    """``h`` for ``h``, ``h[0]``, ``h[:, 1:]``, ``h.T`` (views changing ``h``)."""
    while isinstance(expr, cst.Subscript) or (
        isinstance(expr, cst.Attribute) and expr.attr.value in ("T", "mT")
    ):
        expr = expr.value
    return expr if isinstance(expr, cst.Name) else None


def _operation(analysis: object, top: cst.BaseExpression) -> cst.BaseExpression | None:
    """The op expression taking ``top`` as an operand."""
    parent = analysis.parent(top)  # type: ignore[attr-defined]
    if isinstance(parent, cst.BinaryOperation):
        return parent
    if isinstance(parent, cst.Arg):
        call = analysis.parent(parent)  # type: ignore[attr-defined]
        return call if isinstance(call, cst.Call) else None
    if isinstance(parent, cst.Attribute):
        call = analysis.parent(parent)  # type: ignore[attr-defined]
        return call if isinstance(call, cst.Call) and call.func is parent else None
    return None


def _tensor_exponent(
    rule: InplaceOnSaved, operands: list[cst.BaseExpression], at: cst.CSTNode
) -> bool:
    """``x ** y`` with a tensor exponent (or ``2 ** x``) also saves its result."""
    if len(operands) < 2:
        return False
    base, exponent = operands[0], operands[1]
    return is_number_literal(base) or rule.analysis.is_tensor(exponent, at)


def _bound_names(statement: cst.CSTNode) -> list[str]:
    """Names an assignment statement binds (``a = b = ...``, ``a, b = ...``, ``a += ...``)."""
    targets: list[cst.BaseExpression] = []
    if isinstance(statement, cst.Assign):
        targets = [t.target for t in statement.targets]
    elif isinstance(statement, (cst.AugAssign, cst.AnnAssign)):
        targets = [statement.target]
    names: list[str] = []
    for target in targets:
        if isinstance(target, cst.Name):
            names.append(target.value)
        elif isinstance(target, (cst.Tuple, cst.List)):
            names += [e.value.value for e in target.elements if isinstance(e.value, cst.Name)]
    return names


def _is_assigned(analysis: object, name: cst.Name) -> bool:
    parent = analysis.parent(name)  # type: ignore[attr-defined]
    return isinstance(parent, cst.AssignTarget)


class _AttributeUses(cst.CSTVisitor):
    """Reads of ``self.<attr>`` (not assignments to it) in a class."""

    def __init__(self, attr: str) -> None:
        self.attr = attr
        self.count = 0

    def visit_AssignTarget(self, node: cst.AssignTarget) -> bool:
        return not isinstance(node.target, cst.Attribute)

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if node.attr.value == self.attr and isinstance(node.value, cst.Name):
            self.count += node.value.value == "self"


class _Backwards(cst.CSTVisitor):
    def __init__(self) -> None:
        self.calls: list[cst.Call] = []

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value in ("backward", "grad"):
            self.calls.append(node)


def _backward_calls(scope: cst.CSTNode) -> list[cst.Call]:
    finder = _Backwards()
    walk(scope, finder)
    return finder.calls


def _loop_without(analysis: object, node: cst.CSTNode, binding: cst.CSTNode) -> cst.CSTNode | None:
    """The outermost loop around ``node`` that does not contain ``binding``."""
    found = None
    for ancestor in analysis.ancestors(node):  # type: ignore[attr-defined]
        if isinstance(ancestor, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            break
        if isinstance(ancestor, (cst.For, cst.While)) and not analysis.contains(  # type: ignore[attr-defined]
            ancestor, binding
        ):
            found = ancestor
    return found


def _operand(value: cst.BaseExpression, operator: cst.BaseBinaryOp) -> cst.BaseExpression:
    """``value`` as the right operand of ``operator``, parenthesised where needed."""
    if value.lpar:
        return value
    needs = isinstance(
        value, (cst.BooleanOperation, cst.Comparison, cst.IfExp, cst.Lambda, cst.NamedExpr)
    )
    if isinstance(value, cst.BinaryOperation):
        needs = not isinstance(value.operator, _TIGHTER[type(operator)])
    if isinstance(value, cst.UnaryOperation) and isinstance(value.operator, cst.Not):
        needs = True
    if not needs:
        return value
    return value.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])


def _symbol(operator: cst.BaseBinaryOp) -> str:
    return cst.Module([]).code_for_node(operator).strip()


def _out_of_place_call(analysis: object, call: cst.Call) -> cst.Call | None:
    """``F.relu_(h)`` -> ``F.relu(h)``; ``F.relu(h, inplace=True)`` -> ``F.relu(h)``."""
    func = call.func
    if isinstance(func, cst.Attribute) and func.attr.value.endswith("_"):
        return call.with_changes(func=func.with_changes(attr=cst.Name(func.attr.value[:-1])))
    short = func.attr.value if isinstance(func, cst.Attribute) else ""
    position = INPLACE_FLAG_POSITIONS.get(short)
    if position is None:
        return None
    flag = inplace_flag(call, position)
    if flag is None or flag.keyword is None:
        return None  # a positional flag: the arguments before it would shift
    args = [a for a in call.args if a is not flag]
    if args:
        args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return call.with_changes(args=args)


class _StripUnderscores(cst.CSTTransformer):
    """Rename ``m_`` to ``m`` in the given chain of method calls."""

    def __init__(self, calls: list[cst.Call]) -> None:
        super().__init__()
        self.funcs = {id(c.func) for c in calls}

    def leave_Attribute(
        self, original_node: cst.Attribute, updated_node: cst.Attribute
    ) -> cst.Attribute:
        if id(original_node) in self.funcs:
            return updated_node.with_changes(attr=cst.Name(original_node.attr.value[:-1]))
        return updated_node
