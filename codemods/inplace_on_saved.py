"""GF204 inplace-on-saved."""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass, replace

import libcst as cst

from gradfix.edits import Editor, cst_argument
from gradfix.inplace import (
    NameIndex,
    call_of_argument,
    changes_in_place,
    classify_read,
    first_argument,
    in_autograd_function,
    in_eval_only_branch,
    inplace_function,
    inplace_spelling,
    is_constant,
    is_inplace_call,
    reads_of,
    small_statement,
    spelled_inplace,
)
from gradfix.inplace_flags import FlagSet, flag_sets, sets_flag_of
from gradfix.lazy import lazy_class
from gradfix.module_outputs import (
    OUTPUT_SAVING_MODULES,
    function_value_op,
    module_forwards,
    module_output_op,
)
from gradfix.rebuild import index_elements, is_basic_index
from gradfix.rule import (
    Edit,
    FixAvailability,
    FixPlan,
    FixSafety,
    Invalid,
    Rule,
    RuleContext,
    Valid,
)
from gradfix.semantic import (
    SAVES_OUTPUT,
    TENSOR_OPS,
    Binding,
    Semantic,
    argument,
    argument_node,
    argument_value,
    argument_values,
    is_number_literal,
    is_true,
)
from gradfix.torch_facts import (
    FACTORIES,
    INPLACE_FLAG_POSITIONS,
    MAY_ALIAS_OPS,
    MULTI_OUTPUT_VIEW_OPS,
    VIEW_METHODS,
    canonical_spellings,
    is_inplace_method,
)

#: ``h = h.mul(2)``). Others (``fill_``, ``copy_``, ``zero_``...) get ``h = h.clone()``.
TWIN_METHODS = frozenset(
    "add sub subtract mul multiply div divide true_divide floor_divide pow clamp clamp_min "
    "clamp_max clip masked_fill masked_scatter index_fill index_add index_copy scatter "
    "scatter_add addcmul addcdiv lerp neg abs exp log log1p sigmoid tanh relu sqrt rsqrt "
    "reciprocal floor ceil round trunc sign fmod remainder square sin cos nan_to_num".split()
)
#: Twins whose result has the receiver's dtype whatever the other arguments are.
DTYPE_KEEPING_METHODS = frozenset("masked_fill index_fill".split())
#: the names ``nn.Sequential`` is spelled with
_SEQUENTIAL = frozenset({"Sequential"}) | canonical_spellings("Sequential".__eq__)
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
#: Tensor attributes and methods that read no values (an in-place change leaves them).
METADATA = frozenset(
    "shape size dim ndimension ndim numel nelement dtype device is_floating_point "
    "is_complex element_size stride get_device".split()
)


def _sets_inplace_flag(node: ast.Assign) -> bool:
    """``module.inplace = True``."""
    target = node.targets[0]
    return (
        type(target) is ast.Attribute
        and target.attr == "inplace"
        and type(node.value) is ast.Constant
        and node.value.value is True
    )


@functools.cache
def _augmented() -> dict[type[ast.operator], cst.BaseBinaryOp]:
    """The binary operator of each augmented assignment the fix rewrites (``h += v``)."""
    return {
        ast.Add: cst.Add(), ast.Sub: cst.Subtract(), ast.Mult: cst.Multiply(),
        ast.Div: cst.Divide(), ast.FloorDiv: cst.FloorDivide(), ast.Mod: cst.Modulo(),
        ast.Pow: cst.Power(), ast.MatMult: cst.MatrixMultiply(),
    }  # fmt: skip


@functools.cache
def _tighter() -> dict[type[cst.BaseBinaryOp], tuple[type[cst.BaseBinaryOp], ...]]:
    """Operators binding tighter than each operator (no parentheses needed on the right)."""
    return {
        cst.Add: (cst.Multiply, cst.Divide, cst.FloorDivide, cst.Modulo, cst.MatrixMultiply,
                  cst.Power),
        cst.Subtract: (cst.Multiply, cst.Divide, cst.FloorDivide, cst.Modulo,
                       cst.MatrixMultiply, cst.Power),
        cst.Multiply: (cst.Power,), cst.Divide: (cst.Power,), cst.FloorDivide: (cst.Power,),
        cst.Modulo: (cst.Power,), cst.MatrixMultiply: (cst.Power,), cst.Power: (),
    }  # fmt: skip


@dataclass
class Mutation:
    """One in-place change of the tensor bound to ``name``."""

    statement: ast.stmt
    node: ast.AST  # reported
    name: ast.Name
    form: str  # augassign | method | index | function | module
    call: ast.Call | None = None


@dataclass
class Saver:
    """The op that saved the tensor for backward."""

    node: ast.expr | None  # None: a run saw the save (the op is not in this file's code)
    statement: ast.AST
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
    Activation modules are their functional op (`self.act = nn.Sigmoid()` then
    `g = self.act(h)` saves `g`), and so are an `nn.Sequential` ending in one and a module
    class of the file whose `forward` returns one (`out = self.body(x); out += x`). The
    operands of the changing statement count (`x /= x.norm()`: `norm` saved `x` before
    the division), and so do the inputs of an `nn.Module`'s `forward`, the elements of a
    list of such outputs (`maps[i - 1] += up`), what the rest of a loop body saved in
    the previous iteration, and what saved `x` before `out = x; out[0] = v`. A module's
    `forward` that changes its input is reported when the module of the file calling it
    saved that tensor first (`a = self.branch(x); b = self.scale(x)`, through the
    `forward` of `self.branch`). Also finds any in-place change of one of the views
    `chunk`, `split` or `unbind` returned of a tensor that requires grad (`mu, log_std =
    net(s).chunk(2, -1); log_std.clamp_(-5, 2)`, `for row in h.unbind(0): row.add_(1)`):
    autograd refuses those at once, saved or not ("Output 1 of Split is a view and is
    being modified inplace. This view is the output of a function that returns multiple
    views"). An in-place module or function applied straight to such a result counts
    (`self.drop(F.relu(h))` with `nn.Dropout(inplace=True)`), and so does a module whose
    `inplace` flag is set after it was built (`self.act.inplace = True`,
    `setattr(m, "inplace", True)`, a loop over `model.modules()` setting it, filtered
    by `isinstance` or not): that finding is on the statement setting the flag.
    A name holding a view of a saved tensor (`top = h[:2]`, `h.T`, `h.view(-1)`) changed
    in place is reported too, without a fix (the change is meant for `h`).
    Functions held as attributes are their torch function (`self.act = F.relu`,
    `self.act = get_activation("relu")` from a function of the file choosing it by
    the literal). Rewrites the change out of place.

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
    view of another tensor; `h = F.relu(h, inplace=True)` is the tensor `h` held before)
    and no other name, view or container holding the tensor is read after the change;
    otherwise the finding is reported without a fix. For a parameter of the function the
    fix is unsafe (the caller's tensor is no longer changed), and there is none when the
    function does not read the name after the change (then the change is for the
    caller). The fix is safe when the values keep their dtype: number operands
    (`h += 1`, `h.clamp_(0, 1)`, `h.masked_fill_(m, 0.0)`), `h = h.clone()` before an
    index assignment or a change through a view (`h[0].zero_()`), dropping
    `inplace=True`. It is unsafe with a tensor operand (`h += bias`): `h + bias` may
    promote the dtype where `h += bias` kept it. `inplace=True` is dropped from a module
    attribute only when the module is used once, on this tensor (other call sites may
    rely on the in-place change); it is unsafe when an alias read later, or the caller,
    saw the activation applied in place. `maps[i] += v` on a list becomes
    `maps[i] = maps[i] + v` (unsafe) only when the list is only indexed, measured or
    returned (no other name holds the element). `out = x` becomes `out = x.clone()` when
    `x` is only measured (`x.size(0)`) after the change (unsafe for a parameter `x`).
    `m.inplace = True` becomes `m.inplace = False` (unsafe: every module the statement
    reaches stops changing its input, which code may read afterwards). An in-place
    module applied to a temporary loses `inplace=True` when it is used once (safe:
    nothing else holds the temporary). A view of `chunk` / `split` / `unbind` is
    rebound (`log_std = log_std.clamp(-5, 2)`)
    when nothing reads the tensor the views share after the change (it would have shown
    the change) and the name holds one view, outside a loop over them; otherwise, and for
    a tuple of views (`parts[0].mul_(2)`), the change is reported without a fix.
    `tensor_split`, `hsplit`, `unsafe_chunk` return plain slices: their views follow the
    rules above. Changes under `no_grad()` are reported without
    a fix: out of place they would cut the graph. Ops recorded under `no_grad()`, tensors
    that do not require grad, a backward call between the op and the change, eval-only
    branches (`if not self.training:`), the inside of a custom `torch.autograd.Function`
    and leaves (GF201) are not reported.
    """

    code = "GF204"
    #: visit_Assign: ``m.inplace = True``, ``h[0] = ...``
    assign_targets = frozenset({ast.Attribute, ast.Subscript})
    name = "inplace-on-saved"
    synopsis = (
        'Finds in-place changes of a tensor an earlier op saved for backward ("modified '
        'by an inplace operation") and makes them out of place.'
    )
    message = (
        "In-place change of a tensor saved for backward: backward fails with "
        "'modified by an inplace operation'"
    )
    fix_safety = FixSafety.SAFE
    fix_availability = FixAvailability.SOMETIMES
    fix_safeties = (FixSafety.SAFE, FixSafety.UNSAFE)

    def __init__(self, context: RuleContext) -> None:
        super().__init__(context)
        self.names = NameIndex(self.analysis)
        self._loop_backwards: dict[ast.AST, list[ast.Call]] = {}
        self._flags_reported: set[int] = set()

    VALID = [
        Valid(
            """
            import torch
            w = torch.randn(3, 4, requires_grad=True)
            h = w @ torch.randn(4, 4)
            rows = h[1:]
            rows += 1  # matmul saved its inputs, not h
            copy = h[:, :2].clone()
            out = torch.sigmoid(copy)
            copy.mul_(2)  # a copy, not a view of h; sigmoid saved its output, not `copy`
            (h.sum() + out.sum()).backward()
            """
        ),
        Valid(
            """
            import torch
            from torch import nn

            class Block(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.fc = nn.Linear(3, 3)
                    self.act = nn.ReLU()
                    self.drop = nn.Dropout(0.1)
                    for m in self.modules():
                        if isinstance(m, nn.ReLU):
                            m.inplace = True

                def forward(self, x):
                    h = self.act(self.fc(x))  # a Linear does not save its output
                    return self.drop(torch.sigmoid(h))  # this Dropout stays out of place
            """
        ),
        Valid(
            """
            import torch
            w = torch.randn(4, requires_grad=True)
            first, second = (w + 1).tensor_split(2)  # plain slices
            second.mul_(3)
            with torch.no_grad():
                low, high = torch.sigmoid(w).detach().split(2)
            high.clamp_(0.1, 0.9)  # the base needs no grad
            (first + second + high).sum().backward()
            """
        ),
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
        Valid(
            """
            import torch
            from torch import nn


            class Block(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.fc = nn.Linear(4, 4)
                    self.drop = nn.Dropout(0.1)

                def forward(self, x):
                    x = x / x.norm(dim=-1, keepdim=True)  # out of place
                    h = self.drop(self.fc(x))
                    h += x  # dropout saves its mask, not its output
                    return h

                def scale_(self, x):
                    n = x.norm()
                    x /= n  # only the caller reads the change
            """
        ),
        Valid(
            """
            import torch
            w = torch.randn(4, 4, requires_grad=True)
            h = torch.zeros(4, 1)
            for step in range(4):
                h[step] = 1.0  # each step's graph is gone by the next change
                loss = (w @ h).sum()
                loss.backward()
            """
        ),
        Valid(
            """
            import torch
            from torch import nn

            ACTIVATIONS = {"relu": nn.ReLU, "none": nn.Identity}


            class ConvBNAct(nn.Module):
                def __init__(self, cin, cout, act="relu"):
                    super().__init__()
                    self.conv = nn.Conv2d(cin, cout, 3, padding=1)
                    self.act = ACTIVATIONS[act]()

                def forward(self, x):
                    return self.act(self.conv(x))


            class Residual(nn.Module):
                def __init__(self, c):
                    super().__init__()
                    self.body = nn.Sequential(ConvBNAct(c, c), ConvBNAct(c, c, act="none"))

                def forward(self, x):
                    out = self.body(x)
                    out += x  # the last block has no activation
                    return out
            """
        ),
        Valid(
            """
            import torch
            import torch.nn.functional as F
            from torch import nn


            class TopDown(nn.Module):
                def __init__(self, channels, width):
                    super().__init__()
                    self.laterals = nn.ModuleList([nn.Conv2d(c, width, 1) for c in channels])
                    self.act = nn.ReLU()

                def forward(self, feats):
                    maps = [lat(f) for f, lat in zip(feats, self.laterals)]
                    for i in range(len(maps) - 1, 0, -1):
                        maps[i - 1] += F.interpolate(maps[i], scale_factor=2.0)  # conv output
                    acts = [self.act(m) for m in maps]
                    acts[0] = acts[0] * 2  # puts a new tensor in the list
                    return acts
            """
        ),
        Valid(
            """
            import torch
            from torch import nn


            class Mask(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.proj = nn.Linear(4, 4)

                def forward(self, x):
                    out = x * 1.0
                    keep = out
                    keep[..., :2] = 0.0  # nothing saved `out`: mul by a constant
                    return self.proj(keep)
            """
        ),
        Valid(
            """
            import torch
            from torch import nn


            class Branch(nn.Module):
                def __init__(self, c):
                    super().__init__()
                    self.conv = nn.Conv2d(c, c, 1)

                def forward(self, x):
                    return self.conv(x)


            class Scale(nn.Module):
                def forward(self, x):
                    x *= 2.0
                    return x + 1


            class Block(nn.Module):
                def __init__(self, c):
                    super().__init__()
                    self.branch = Branch(c)
                    self.scale = Scale()

                def forward(self, x):
                    b = self.scale(x)  # before anything saved x
                    a = self.branch(x)
                    return a * b
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            w = torch.randn(3, 4, requires_grad=True)
            v = torch.randn(3, 2, requires_grad=True)
            h = torch.tanh(w)
            out = h.T @ v  # saves h.T, a view of h
            cols = h[:, 1:]
            cols.zero_()  # changes h through the view
            out.sum().backward()
            """,
            report_only=True,
        ),
        Invalid(
            """
            import torch.nn as nn
            import torch.nn.functional as F

            class FeedForward(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.fc1 = nn.Linear(4, 8)
                    self.drop = nn.Dropout(0.1, inplace=True)
                    self.fc2 = nn.Linear(8, 4)

                def forward(self, x):
                    return self.fc2(self.drop(F.relu(self.fc1(x))))
            """,
            """
            import torch.nn as nn
            import torch.nn.functional as F

            class FeedForward(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.fc1 = nn.Linear(4, 8)
                    self.drop = nn.Dropout(0.1)
                    self.fc2 = nn.Linear(8, 4)

                def forward(self, x):
                    return self.fc2(self.drop(F.relu(self.fc1(x))))
            """,
        ),
        Invalid(
            """
            import torch
            from torch import nn

            class Squash(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.fc = nn.Linear(3, 3)
                    self.clip = nn.Hardtanh()
                    self.clip.inplace = True  # no copy

                def forward(self, x):
                    return self.clip(torch.exp(self.fc(x)))
            """,
            """
            import torch
            from torch import nn

            class Squash(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.fc = nn.Linear(3, 3)
                    self.clip = nn.Hardtanh()
                    self.clip.inplace = False  # no copy

                def forward(self, x):
                    return self.clip(torch.exp(self.fc(x)))
            """,
        ),
        Invalid(
            """
            import torch
            from torch import nn

            class Policy(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.body = nn.Linear(3, 4)

                def forward(self, s):
                    mean, log_std = self.body(s).chunk(2, -1)
                    log_std.clamp_(-5, 2)
                    return mean + log_std.exp()
            """,
            """
            import torch
            from torch import nn

            class Policy(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.body = nn.Linear(3, 4)

                def forward(self, s):
                    mean, log_std = self.body(s).chunk(2, -1)
                    log_std = log_std.clamp(-5, 2)
                    return mean + log_std.exp()
            """,
        ),
        Invalid(
            """
            import torch
            w = torch.randn(2, 3, requires_grad=True)
            rows = torch.exp(w).unbind(0)
            rows[1].mul_(0.5)  # the tuple holds the views: nothing to rebind
            torch.stack(rows).sum().backward()
            """,
            report_only=True,
        ),
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
            out = F.relu(torch.sigmoid(w))
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
        Invalid(
            """
            import torch
            from torch import nn


            class Gate(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.proj = nn.Linear(4, 4)
                    self.squash = nn.Sigmoid()

                def forward(self, x):
                    g = self.squash(self.proj(x))
                    g[:, 0] = 1.0  # keep the first channel open
                    return x * g
            """,
            """
            import torch
            from torch import nn


            class Gate(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.proj = nn.Linear(4, 4)
                    self.squash = nn.Sigmoid()

                def forward(self, x):
                    g = self.squash(self.proj(x))
                    g = g.clone()
                    g[:, 0] = 1.0  # keep the first channel open
                    return x * g
            """,
        ),
        Invalid(
            """
            import torch
            from torch import nn


            class Normalize(nn.Module):
                def forward(self, feats):
                    feats /= feats.norm(dim=-1, keepdim=True)
                    return feats * 2
            """,
            """
            import torch
            from torch import nn


            class Normalize(nn.Module):
                def forward(self, feats):
                    feats = feats / feats.norm(dim=-1, keepdim=True)
                    return feats * 2
            """,
        ),
        Invalid(
            """
            import torch
            import torch.nn.functional as F
            from torch import nn


            class Unit(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.conv = nn.Conv2d(3, 3, 3, padding=1)

                def forward(self, x):
                    h = self.conv(x)
                    h = F.relu(h, inplace=True)
                    h += self.conv(h)
                    return h
            """,
            """
            import torch
            import torch.nn.functional as F
            from torch import nn


            class Unit(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.conv = nn.Conv2d(3, 3, 3, padding=1)

                def forward(self, x):
                    h = self.conv(x)
                    h = F.relu(h, inplace=True)
                    h = h + self.conv(h)
                    return h
            """,
        ),
        Invalid(
            """
            import torch
            w = torch.randn(4, 4, requires_grad=True)
            h = torch.zeros(4, 1)
            total = 0
            for step in range(4):
                h[step] = 1.0  # the previous step's matmul saved h
                total = total + (w @ h).sum()
            total.backward()
            """,
            """
            import torch
            w = torch.randn(4, 4, requires_grad=True)
            h = torch.zeros(4, 1)
            total = 0
            for step in range(4):
                h = h.clone()
                h[step] = 1.0  # the previous step's matmul saved h
                total = total + (w @ h).sum()
            total.backward()
            """,
        ),
        Invalid(
            """
            import torch
            from torch import nn

            ACTIVATIONS = {"relu": nn.ReLU, "none": nn.Identity}


            class ConvBNAct(nn.Module):
                def __init__(self, cin, cout, act="relu"):
                    super().__init__()
                    self.conv = nn.Conv2d(cin, cout, 3, padding=1)
                    self.act = ACTIVATIONS[act]()

                def forward(self, x):
                    return self.act(self.conv(x))


            class Residual(nn.Module):
                def __init__(self, c):
                    super().__init__()
                    self.body = nn.Sequential(ConvBNAct(c, c), ConvBNAct(c, c))

                def forward(self, x):
                    out = self.body(x)
                    out += x  # the last ConvBNAct's ReLU saved `out`
                    return out
            """,
            """
            import torch
            from torch import nn

            ACTIVATIONS = {"relu": nn.ReLU, "none": nn.Identity}


            class ConvBNAct(nn.Module):
                def __init__(self, cin, cout, act="relu"):
                    super().__init__()
                    self.conv = nn.Conv2d(cin, cout, 3, padding=1)
                    self.act = ACTIVATIONS[act]()

                def forward(self, x):
                    return self.act(self.conv(x))


            class Residual(nn.Module):
                def __init__(self, c):
                    super().__init__()
                    self.body = nn.Sequential(ConvBNAct(c, c), ConvBNAct(c, c))

                def forward(self, x):
                    out = self.body(x)
                    out = out + x  # the last ConvBNAct's ReLU saved `out`
                    return out
            """,
        ),
        Invalid(
            """
            import torch
            import torch.nn.functional as F
            from torch import nn


            class Lateral(nn.Module):
                def __init__(self, cin, cout):
                    super().__init__()
                    self.conv = nn.Conv2d(cin, cout, 1)
                    self.act = nn.ReLU()

                def forward(self, x):
                    return self.act(self.conv(x))


            class TopDown(nn.Module):
                def __init__(self, channels, width):
                    super().__init__()
                    self.laterals = nn.ModuleList()
                    for c in channels:
                        self.laterals.append(Lateral(c, width))

                def forward(self, feats):
                    maps = [lat(f) for f, lat in zip(feats, self.laterals)]
                    for i in range(len(maps) - 1, 0, -1):
                        maps[i - 1] += F.interpolate(maps[i], scale_factor=2.0)
                    return maps
            """,
            """
            import torch
            import torch.nn.functional as F
            from torch import nn


            class Lateral(nn.Module):
                def __init__(self, cin, cout):
                    super().__init__()
                    self.conv = nn.Conv2d(cin, cout, 1)
                    self.act = nn.ReLU()

                def forward(self, x):
                    return self.act(self.conv(x))


            class TopDown(nn.Module):
                def __init__(self, channels, width):
                    super().__init__()
                    self.laterals = nn.ModuleList()
                    for c in channels:
                        self.laterals.append(Lateral(c, width))

                def forward(self, feats):
                    maps = [lat(f) for f, lat in zip(feats, self.laterals)]
                    for i in range(len(maps) - 1, 0, -1):
                        maps[i - 1] = maps[i - 1] + F.interpolate(maps[i], scale_factor=2.0)
                    return maps
            """,
        ),
        Invalid(
            """
            import torch
            from torch import nn


            class Split(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.proj = nn.Linear(4, 4)

                def forward(self, x):
                    y = self.proj(x)
                    out = x
                    out[..., :2] = y[..., :2]  # `proj` saved x
                    return out * x.size(-1) + y
            """,
            """
            import torch
            from torch import nn


            class Split(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.proj = nn.Linear(4, 4)

                def forward(self, x):
                    y = self.proj(x)
                    out = x.clone()
                    out[..., :2] = y[..., :2]  # `proj` saved x
                    return out * x.size(-1) + y
            """,
        ),
        Invalid(
            """
            import torch
            from torch import nn


            class Branch(nn.Module):
                def __init__(self, c):
                    super().__init__()
                    self.conv = nn.Conv2d(c, c, 1)

                def forward(self, x):
                    return self.conv(x)


            class Scale(nn.Module):
                def forward(self, x):
                    x *= 2.0
                    return x + 1


            class Block(nn.Module):
                def __init__(self, c):
                    super().__init__()
                    self.branch = Branch(c)
                    self.scale = Scale()

                def forward(self, x):
                    a = self.branch(x)
                    b = self.scale(x)  # changes the x the branch's conv saved
                    return a * b
            """,
            """
            import torch
            from torch import nn


            class Branch(nn.Module):
                def __init__(self, c):
                    super().__init__()
                    self.conv = nn.Conv2d(c, c, 1)

                def forward(self, x):
                    return self.conv(x)


            class Scale(nn.Module):
                def forward(self, x):
                    x = x * 2.0
                    return x + 1


            class Block(nn.Module):
                def __init__(self, c):
                    super().__init__()
                    self.branch = Branch(c)
                    self.scale = Scale()

                def forward(self, x):
                    a = self.branch(x)
                    b = self.scale(x)  # changes the x the branch's conv saved
                    return a * b
            """,
        ),
    ]

    # -- collecting mutations ----------------------------------------------------------------
    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        target = node.target
        if not changes_in_place(node):
            return
        if type(target) is ast.Name:
            self._check(Mutation(node, node, target, "augassign"))
        elif type(target) is ast.Subscript:
            base = _base_name(target)
            if base is not None:
                self._check(Mutation(node, node, base, "index"))

    def visit_Assign(self, node: ast.Assign) -> None:
        if len(node.targets) == 1 and _sets_inplace_flag(node):
            self._check_inplace_flag(node)
        if len(node.targets) != 1 or type(node.targets[0]) is not ast.Subscript:
            return
        base = _base_name(node.targets[0])
        if base is not None:
            self._check(Mutation(node, node, base, "index"))

    def takes_call(self, spelled: str, aliased: tuple[str, ...]) -> bool:
        """The walk hands :meth:`visit_Call` only the calls
        :meth:`_may_change_in_place` keeps (asked once per spelling)."""
        return bool(self._flag_sets) or inplace_spelling(spelled, aliased, self._spelled)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if not self._may_change_in_place(func):
            return  # cheap first: most calls are none of the shapes below
        if self.analysis.call_name(node) == "torch.nn.Sequential":
            if small_statement(self.analysis, node) is not None:
                self._check_sequential(node)
            return
        form = "function" if inplace_function(self.analysis, node) is not None else None
        first = first_argument(node)
        if form is None and first is not None and self._inplace_module(func):
            form = "module"
        if form is None and first is not None and self._flag_sets:
            self._check_flag_set(node, first)
        if form is not None and first is not None:
            base = _base_name(first)
            statement = small_statement(self.analysis, node)
            if base is not None and statement is not None:
                self._check(Mutation(statement, node, base, form, node))
            elif statement is not None:
                self._check_nested(node, first, form, statement)
            return
        if type(func) is not ast.Attribute or not is_inplace_method(func.attr):
            return
        if self.analysis.qualified_name(func) is not None:
            return  # a module function (``torch.manual_seed``...), not a tensor method
        receiver = func.value
        if is_inplace_call(receiver):
            return  # ``h.mul_(2).add_(1)``: reported at the innermost call
        base = _base_name(receiver)
        statement = small_statement(self.analysis, node)
        if base is not None and statement is not None:
            self._check(Mutation(statement, node, base, "method", node))

    def _may_change_in_place(self, func: ast.expr) -> bool:
        """A call of ``func`` may be one :meth:`visit_Call` checks: an in-place function or
        method, ``nn.Sequential``, a module built with ``inplace=True`` (by the names they
        are spelled or imported as), or any call where the file sets an ``inplace`` flag."""
        return bool(self._flag_sets) or spelled_inplace(self.analysis, func, self._spelled)

    @functools.cached_property
    def _spelled(self) -> frozenset[str]:
        return self._inplace_module_names | _SEQUENTIAL

    def _check_inplace_flag(self, node: ast.Assign) -> None:
        """``m.inplace = True`` on a built module, where a run saw that module's in-place
        change break a tensor saved for backward (static analysis cannot tell which
        modules the loop reaches): set the flag False."""
        if not self.proven_at_run(node.lineno, "inplace-saved"):
            return

        def build(editor: Editor) -> list[Edit]:
            value = editor.node(node.value)
            return [Edit(value, cst.Name("False"))]

        message = (
            "`inplace = True` makes the module overwrite its input, which an op saved for "
            "backward (seen in a run): backward fails with 'modified by an inplace "
            "operation'; keep the module out of place"
        )
        self.report(node, message, fix=self.plan(build, "Set `inplace = False`"))

    # -- deciding ----------------------------------------------------------------------------
    def _check(self, mutation: Mutation) -> None:
        analysis = self.analysis
        name, statement = mutation.name, mutation.statement
        binding = analysis.reaching_binding(name, statement)
        if binding is None:
            return
        if analysis.scope_of(binding.node).node is not analysis.scope_of(statement).node:
            return
        if analysis.leaf_reason(name, statement) is not None:
            return  # raises at once: GF201 leaf-inplace
        if in_eval_only_branch(analysis, statement):
            return
        if in_autograd_function(analysis, statement):
            return  # autograd records nothing inside a custom Function
        if _is_list_display(binding):
            self._check_element(mutation, binding)
            return
        views = self._multi_output_views(binding)
        if views is not None:
            self._check_multi_output_view(mutation, binding, views)
            return
        saver = self._saver(name, binding, statement)
        proven = self._saved_at_run(statement)  # the run stands in for what is not known
        if saver is None and not proven and self._check_view_of_saved(mutation, binding):
            return
        if saver is None and proven:
            saver = Saver(None, statement, "an op had saved it (seen in a run)", False)
        elif saver is None:
            self._check_caller_saved(mutation, binding)
            return
        elif not (proven or self._graph_needed(saver, mutation)):
            return
        assert saver is not None
        fix = self._fix(mutation, binding, proven)
        self.report(mutation.node, self._message(mutation, saver), fix=fix)

    # -- a temporary changed in place: ``self.drop(F.relu(h))`` --------------------------------
    def _check_nested(
        self, call: ast.Call, first: ast.expr, form: str, statement: ast.stmt
    ) -> None:
        """An in-place module or function applied to the result of an op that saved it."""
        saver = self._nested_saver(first, statement)
        if saver is None:
            return
        fix = None
        if form == "module" and self._module_uses(call.func) == 1:
            position = self._inplace_flag_position(call.func)
            constructor = self._constructor(call.func)
            if position is not None and constructor is not None:
                fix = self._drop_flag(constructor, position)  # nothing else holds the result
        elif form == "function" and _has_out_of_place(call):
            fix = self._out_of_place_plan(call)
        self.report(call, self._temporary_message(call, saver), fix=fix)

    def _nested_saver(self, expr: ast.expr, statement: ast.stmt) -> Saver | None:
        """``expr`` is a recorded op that saves its result (``F.relu(h)``, ``self.act(h)``)."""
        op = self._output_saving_op(expr, expr)
        if op is None or not self._recorded(expr, expr):
            return None
        return Saver(expr, statement, f"`{op}` saved its output", True)

    def _temporary_message(self, call: ast.Call, saver: Saver) -> str:
        label = self.analysis.segment(call.func)
        return (
            f"`{label}(...)` changes in place the result of the op inside it, but "
            f"{saver.description} for backward: backward fails with 'modified by an "
            "inplace operation'; apply it out of place"
        )

    def _out_of_place_plan(self, call: ast.Call) -> FixPlan:
        def out_of_place(editor: Editor) -> list[Edit] | None:
            old = editor.node(call)
            new_call = _out_of_place_call(old)
            return None if new_call is None else [Edit(old, new_call)]

        return self.plan(out_of_place, "Call it out of place")

    # -- ``inplace = True`` set on a module after it was built --------------------------------
    @functools.cached_property
    def _flag_sets(self) -> list[FlagSet]:
        return flag_sets(self.analysis)

    def _check_flag_set(self, call: ast.Call, first: ast.expr) -> None:
        """``m.inplace = True`` reaches the module ``call`` runs, whose input was saved: the
        finding goes to the statement setting the flag, where the fix is."""
        analysis = self.analysis
        module_class = analysis.nn_module_class(call.func, call)
        if module_class not in INPLACE_MODULES:
            return
        flags = [
            f for f in self._flag_sets if sets_flag_of(analysis, f, call.func, call, module_class)
        ]
        if not flags or any(id(f.statement) in self._flags_reported for f in flags):
            return
        saver = self._module_input_saver(call, first)
        if saver is None:
            return
        flag = flags[0]
        self._flags_reported.add(id(flag.statement))
        code = " ".join(self._statement_code(flag.statement).split())
        message = (
            f"`{code}` makes `nn.{module_class}` change its input in place, but at line "
            f"{call.lineno} (`{analysis.segment(call.func)}(...)`) {saver.description} "
            "for backward: backward fails with 'modified by an inplace operation'; leave "
            "`inplace` False"
        )
        self.report(flag.statement, message, fix=self._flag_off(flag))

    def _module_input_saver(self, call: ast.Call, first: ast.expr) -> Saver | None:
        analysis = self.analysis
        statement = small_statement(analysis, call)
        if statement is None or analysis.in_no_grad(call):
            return None
        if type(first) is not ast.Name:
            return self._nested_saver(first, statement)
        binding = analysis.reaching_binding(first, statement)
        if binding is None or analysis.leaf_reason(first, statement) is not None:
            return None
        if analysis.scope_of(binding.node).node is not analysis.scope_of(statement).node:
            return None
        saver = self._saver(first, binding, statement)
        mutation = Mutation(statement, call, first, "module", call)
        return saver if saver is not None and self._graph_needed(saver, mutation) else None

    def _flag_off(self, flag: FlagSet) -> FixPlan:
        """``m.inplace = True`` -> ``m.inplace = False``: unsafe, every module the
        statement reaches stops changing its input, which code may read afterwards."""

        def build(editor: Editor) -> list[Edit]:
            old = editor.node(flag.value)
            assert isinstance(old, cst.BaseExpression)
            return [Edit(old, cst.Name("False", lpar=old.lpar, rpar=old.rpar))]

        return self.plan(build, "Leave `inplace` False", safety=FixSafety.UNSAFE)

    # -- a named view of a saved tensor: ``top = h[:2]; top.mul_(2)`` ---------------------------
    def _check_view_of_saved(self, mutation: Mutation, binding: Binding) -> bool:
        """The name holds a view (basic slicing, ``.T``, ``view``/``transpose``...) of a
        tensor an op saved: the change bumps the version the view shares with it.
        Reported without a fix: the change is meant for the base."""
        base = self._viewed_name(binding)
        previous = self.analysis.reaching_binding(base, binding.node) if base else None
        if base is None or previous is None:
            return False
        statement = mutation.statement
        saver = self._saver(base, previous, statement)
        through_base = replace(mutation, name=base)
        if saver is None or not self._graph_needed(saver, through_base):
            return False
        self.report(mutation.node, self._message(through_base, saver))
        return True

    def _viewed_name(self, binding: Binding) -> ast.Name | None:
        """``h`` when ``binding`` binds a view of it: ``h[:2]``, ``h[0, 1:]``, ``h.T``,
        ``h.view(-1)``, ``h.transpose(0, 1)``."""
        value = binding.value
        if binding.kind != "assign" or binding.unpack_index is not None or value is None:
            return None
        if type(value) is ast.Subscript:
            elements = index_elements(self.analysis, value)
            if not all(is_basic_index(e) for e in elements):
                return None  # a tensor or list index copies
            value = value.value
        elif type(value) is ast.Call and type(value.func) is ast.Attribute:
            receiver = value.func.value
            if value.func.attr not in VIEW_METHODS or not self.analysis.is_tensor(receiver, value):
                return None
            value = receiver
        elif type(value) is ast.Attribute and value.attr in ("T", "mT"):
            value = value.value
        else:
            return None
        return value if type(value) is ast.Name and value.id != binding.name else None

    # -- one of the views of ``chunk`` / ``split`` / ``unbind`` -------------------------------
    def _multi_output_views(self, binding: Binding, depth: int = 0) -> ast.Call | None:
        """The recorded ``x.chunk(2)`` / ``torch.split(x, 1)`` / ``x.unbind(0)`` of a tensor
        that requires grad whose views ``binding`` holds: unpacked (``a, b = x.chunk(2)``),
        all of them (``parts = x.split(1)``), iterated (``for p in x.unbind(0)``) or one
        taken (``q = x.chunk(2)[1]``, ``q = parts[0]``)."""
        value = binding.value
        if binding.kind not in ("assign", "for") or value is None or depth > 3:
            return None
        if binding.unpack_index is None and type(value) is ast.Subscript:
            return self._views_taken(value.value, binding.node, depth)
        if type(value) is not ast.Call:
            return None
        op = self.analysis.tensor_op(value, binding.node)
        if op is None or op[0] not in MULTI_OUTPUT_VIEW_OPS:
            return None
        return value if self._recorded(value, binding.node) else None

    def _views_taken(self, source: ast.expr, at: ast.AST, depth: int) -> ast.Call | None:
        """The views call ``source`` is or names (the tuple one view is taken from)."""
        if type(source) is ast.Call:
            fake = Binding("", "assign", at, source, 0, 0)
            return self._multi_output_views(fake, depth + 1)
        if type(source) is not ast.Name:
            return None
        previous = self.analysis.reaching_binding(source, at)
        if previous is None or previous.unpack_index is not None or previous.kind != "assign":
            return None
        return self._multi_output_views(previous, depth + 1)

    def _check_multi_output_view(
        self, mutation: Mutation, binding: Binding, views: ast.Call
    ) -> None:
        """Changing one of several views in place raises at once, whatever was saved."""
        holds_all = binding.kind == "assign" and binding.unpack_index is None
        holds_all = holds_all and binding.value is views  # ``parts = x.split(1)``
        if holds_all and not _through_element(mutation):
            return  # ``parts += (t,)`` builds another tuple
        if self.analysis.in_no_grad(mutation.statement):
            return  # allowed: autograd checks views only when it records the change
        op = self.analysis.tensor_op(views, binding.node)
        assert op is not None
        code = " ".join(self._statement_code(mutation.statement).split())
        code = code if len(code) <= 40 else code[:37] + "..."
        message = (
            f"`{code}` changes in place one of the views `{op[0]}` returned (line "
            f"{views.lineno}) of a tensor that requires grad: autograd refuses it ('the "
            "output of a function that returns multiple views'); use the out-of-place form"
        )
        fix = None if holds_all else self._multi_output_view_fix(mutation, binding, views)
        self.report(mutation.node, message, fix=fix)

    def _multi_output_view_fix(
        self, mutation: Mutation, binding: Binding, views: ast.Call
    ) -> FixPlan | None:
        """Rebinding the view's name keeps what the code reads when nothing reads the
        tensor the views share afterwards (it would have seen the change)."""
        analysis = self.analysis
        if binding.kind != "assign" or not self._no_alias_read_after(mutation, binding):
            return None
        if _loop_without(self, mutation.statement, binding.node) is not None:
            return None
        func = views.func
        base = func.value if type(func) is ast.Attribute and func.value is not None else None
        if analysis.call_name(views) is not None:
            base = first_argument(views)
        base_binding = analysis.reaching_binding(base, views) if type(base) is ast.Name else None
        if type(base) is ast.Name and base_binding is None:
            return None
        if base_binding is not None:
            scope = analysis.scope_of(mutation.statement).node
            after = analysis.end_index(mutation.statement)
            if any(reads_of(analysis, self.names, base_binding, scope, after, 1 << 62)):
                return None
        return self._rebinding_fix(mutation, binding)

    def _saved_at_run(self, statement: ast.stmt) -> bool:
        """A run of the program saw this statement change a tensor saved for backward."""
        lines = range(statement.lineno, (statement.end_lineno or statement.lineno) + 1)
        return any(self.proven_at_run(line, "inplace-saved", "view-inplace") for line in lines)

    # -- the input of a module, saved by its caller --------------------------------------------
    def _check_caller_saved(self, mutation: Mutation, binding: Binding) -> None:
        """``forward(self, x)`` changes ``x`` (or ``out = x``) in place, and the module
        that calls this one in the file saved that tensor before the call (``a =
        self.branch(x); b = self.this(x)``). The fixes stop changing the caller's tensor:
        unsafe."""
        root = self._root_binding(binding)
        aliased = self._aliased(root)
        if aliased is not None:
            root = self.analysis.reaching_binding(aliased, root.node) or root
        if not _is_parameter(self, root) or not self.analysis._is_forward_input(root.node):  # type: ignore[arg-type]
            return
        for argument_, call in self._module_calls_passing(root.node):  # type: ignore[arg-type]
            saver = self._caller_saver(argument_, call)
            if saver is not None:
                fix = self._fix(mutation, binding)
                self.report(mutation.node, self._message(mutation, saver), fix=fix)
                return

    def _caller_saver(self, argument_: ast.expr, call: ast.Call) -> Saver | None:
        statement = small_statement(self.analysis, call)
        if type(argument_) is not ast.Name or statement is None:
            return None
        binding = self.analysis.reaching_binding(argument_, call)
        if binding is None:
            return None
        saver = self._saver(argument_, binding, statement)
        passed = Mutation(statement, call, argument_, "module", call)
        if saver is None or not self._graph_needed(saver, passed):
            return None
        where = f"{saver.description} in the caller"
        return replace(saver, description=where)

    def _module_calls_passing(self, param: ast.arg) -> list[tuple[ast.expr, ast.Call]]:
        """The arguments calls of this module class in the file pass for ``param`` of its
        ``forward``: ``self.block(x)`` after ``self.block = Block(...)``."""
        analysis = self.analysis
        forward = analysis.enclosing_function(param)
        cls = analysis.method_class(forward) if forward is not None else None
        if forward is None or cls is None:
            return []
        position = forward.args.args.index(param) - 1
        found: list[tuple[ast.expr, ast.Call]] = []
        for construction in analysis._calls_by_name.get(cls.name, []):
            holder = analysis.parent(construction)
            if type(holder) is not ast.Assign or len(holder.targets) != 1:
                continue
            target = holder.targets[0]
            if type(target) is not ast.Attribute or not analysis.is_self(target.value, holder):
                continue
            owner = analysis.enclosing_class(holder)
            for attr in analysis._attributes.get(target.attr, []):
                call = analysis.parent(attr)
                if type(call) is not ast.Call or call.func is not attr:
                    continue
                if analysis.enclosing_class(call) is owner and analysis.is_self(attr.value, call):  # type: ignore[attr-defined]
                    value = argument(call, param.arg, position)
                    if value is not None:
                        found.append((value, call))
        return found

    def _check_element(self, mutation: Mutation, binding: Binding) -> None:
        """``laterals[i] += v`` on a list of tensors: the element changes in place
        (``laterals[i] = v`` only puts another tensor in the list)."""
        statement = mutation.statement
        if type(statement) is ast.Assign and _element_of(statement.targets[0], mutation.name):
            return
        value = binding.value
        assert value is not None
        elements = [value.elt] if type(value) is ast.ListComp else value.elts  # type: ignore[attr-defined]
        ops = {self._element_op(element) for element in elements}
        op = ops.pop() if len(ops) == 1 else None
        if op is None:
            return
        saver = Saver(value, binding.node, f"`{op}` saved its output (the list's elements)", True)
        if self._graph_needed(saver, mutation):
            fix = self._element_fix(mutation, binding)
            self.report(mutation.node, self._message(mutation, saver), fix=fix)

    def _element_op(self, element: ast.expr) -> str | None:
        """The output-saving op that made a list element, when it was recorded."""
        if type(element) is not ast.Call or self.analysis.in_no_grad(element):
            return None
        op = self._output_saving_op(element, element)
        if op is None:
            return None
        # a module class of the file has parameters: its output requires grad
        through_class = self._module_class(element.func) is None
        return op if through_class or self.analysis.requires_grad(element, element) else None

    def _element_fix(self, mutation: Mutation, binding: Binding) -> FixPlan | None:
        """``xs[i] += v`` -> ``xs[i] = xs[i] + v`` (unsafe: the dtype may change) when the
        list is only ever indexed, so no other name holds the element."""
        statement = mutation.statement
        if type(statement) is not ast.AugAssign or not _element_of(statement.target, mutation.name):
            return None
        operator = _augmented().get(type(statement.op))
        target = statement.target
        if operator is None or type(target) is not ast.Subscript:
            return None
        if not _is_plain_index(target.slice):
            return None
        scope = self.analysis.scope_of(statement).node
        for read in reads_of(self.analysis, self.names, binding, scope, binding.end, 1 << 62):
            if not self._only_indexed(read):
                return None

        def build(editor: Editor) -> list[Edit]:
            old = editor.node(statement)
            assert isinstance(old, cst.AugAssign)
            new = cst.Assign(
                targets=[cst.AssignTarget(old.target)],
                value=cst.BinaryOperation(old.target, operator, _operand(old.value, operator)),
                semicolon=old.semicolon,
            )
            return [Edit(old, new)]

        text = self.analysis.segment(statement.target)
        description = f"Write `{text} = {text} {_symbol(operator)} ...`"
        return self.plan(build, description, safety=FixSafety.UNSAFE)

    def _only_indexed(self, read: ast.Name) -> bool:
        """This read of a list takes an element that no name keeps, its ``len``, or
        returns the list (which holds the new element after the fix)."""
        parent = self.analysis.parent(read)
        if type(parent) is ast.Return:
            return True
        if type(parent) is ast.Call and type(parent.func) is ast.Name:
            return parent.func.id == "len"
        if type(parent) is not ast.Subscript or parent.value is not read:
            return False
        holder = self.analysis.parent(parent)
        return not (type(holder) is ast.Assign and holder.value is parent)

    def _saver(
        self, name: ast.Name, binding: Binding, statement: ast.stmt, depth: int = 0
    ) -> Saver | None:
        """The recorded op that saved the tensor ``name`` holds at ``statement`` (through
        ``out = x``: what saved ``x`` before)."""
        analysis = self.analysis
        value = binding.value
        if binding.kind == "assign" and value is not None and binding.unpack_index is None:
            op = self._output_saving_op(value, binding.node)
            if op is not None and self._recorded(value, binding.node):
                return Saver(value, binding.node, f"`{op}` saved its output", True)
            aliased = self._aliased(binding)
            if aliased is not None and depth < 4:
                previous = analysis.reaching_binding(aliased, binding.node)
                if previous is not None:
                    saver = self._saver(aliased, previous, statement, depth + 1)
                    if saver is not None:
                        return saver
        scope = analysis.scope_of(statement).node
        end = analysis.index(statement)
        reads = list(reads_of(analysis, self.names, binding, scope, binding.end, end))
        if type(statement) is ast.AugAssign or type(statement) is ast.Assign:
            # the value runs before the change: ``x /= x.norm()`` saved ``x`` first
            value = statement.value
            start, stop = analysis.index(value) - 1, analysis.end_index(value) + 1
            reads += reads_of(analysis, self.names, binding, scope, start, stop)
        loop = _loop_without(self, statement, binding.node)
        if loop is not None:
            # the rest of the body ran in the previous iteration, before this change
            start, stop = analysis.end_index(statement), analysis.end_index(loop) + 1
            later = list(reads_of(analysis, self.names, binding, scope, start, stop))
            if later and not self._loop_backward_calls(loop):
                reads += later
        for read in reads:
            if analysis.in_exclusive_branches(read, statement):
                continue  # `if a: x * m` then `else: m.mul_(s)`: the save never happened
            saver = self._saving_use(read)
            if saver is not None and analysis.index(read) > analysis.end_index(statement):
                return replace(saver, description=f"{saver.description} in the previous iteration")
            if saver is not None:
                return saver
        return None

    def _loop_backward_calls(self, loop: ast.AST) -> list[ast.Call]:
        if loop not in self._loop_backwards:
            self._loop_backwards[loop] = _backward_calls(self.analysis, loop)
        return self._loop_backwards[loop]

    def _aliased(self, binding: Binding) -> ast.Name | None:
        """``x`` for ``out = x`` (the same tensor under another name)."""
        value = binding.value
        if binding.kind != "assign" or binding.unpack_index is not None:
            return None
        return value if type(value) is ast.Name and value.id != binding.name else None

    def _forward_saves(self, call: ast.Call, operand: ast.expr, depth: int) -> Saver | None:
        """What saves ``operand`` in the ``forward`` of the module of this file ``call``
        calls (``self.branch(x)`` whose ``forward`` runs ``self.conv(x)``)."""
        analysis = self.analysis
        if operand not in call.args or any(type(a) is ast.Starred for a in call.args):
            return None
        position = call.args.index(operand) + 1  # after ``self``
        for forward in module_forwards(analysis, call.func, call):
            params = forward.args.args
            if position >= len(params):
                continue
            scope = analysis._scopes.get(forward)
            bindings = scope.bindings.get(params[position].arg, []) if scope is not None else []
            binding = next((b for b in bindings if b.node is params[position]), None)
            if binding is None:
                continue
            end = analysis.end_index(forward) + 1
            for read in reads_of(analysis, self.names, binding, forward, binding.end, end):
                saver = self._saving_use(read, depth + 1)
                if saver is not None:
                    return saver
        return None

    def _saving_use(self, name: ast.Name, depth: int = 0) -> Saver | None:
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
            if op in SAVES_OUTPUT and type(call) is ast.Call and self._recorded(call, call):
                return Saver(call, statement, f"`{read.method}` saved its output", True)
            return None
        passed = call_of_argument(analysis, read.top) if read.kind == "escape" else None
        if passed is not None and depth < 3 and self._recorded(passed[0], passed[0]):
            inner = self._forward_saves(passed[0], read.top, depth)  # ``self.branch(x)``
            if inner is not None:
                label = analysis.segment(passed[0].func)
                return Saver(passed[0], statement, f"{inner.description} in `{label}`", False)
        if read.kind != "fresh":
            return None
        op_node = self._operation(read.top)
        if op_node is None or not self._recorded(op_node, op_node):
            return None
        layer = self._module_class(op_node.func) if type(op_node) is ast.Call else None
        if layer in INPUT_SAVING_MODULES:
            return Saver(op_node, statement, f"`nn.{layer}` saved it", False)
        saved = analysis.saved_operands(op_node, op_node) or []
        if any(operand is read.top for operand in saved):
            op = analysis.tensor_op(op_node, op_node)
            label = op[0] if op is not None else "the op"
            return Saver(op_node, statement, f"`{label}` saved it", False)
        return None

    def _operation(self, top: ast.expr) -> ast.expr | None:
        """The op expression taking ``top`` as an operand."""
        parent = self.analysis.parent(top)
        if type(parent) is ast.BinOp:
            return parent
        argument = call_of_argument(self.analysis, top)
        if argument is not None:
            return argument[0]
        if type(parent) is ast.Attribute:
            call = self.analysis.parent(parent)
            return call if type(call) is ast.Call and call.func is parent else None
        return None

    def _recorded(self, op: ast.expr, at: ast.AST) -> bool:
        analysis = self.analysis
        if analysis.in_no_grad(at):
            return False
        if analysis.requires_grad(op, at):
            return True
        # ``self.act(h)`` with ``self.act = F.relu``: the torch function of what it is given
        if type(op) is not ast.Call or function_value_op(analysis, op.func, at) is None:
            return False
        return any(analysis.requires_grad(a, at) for a in op.args)

    def _output_saving_op(self, value: ast.expr, at: ast.AST) -> str | None:
        """The name of the op ``value`` applies when that op saves its result."""
        analysis = self.analysis
        op = analysis.tensor_op(value, at)
        if op is not None:
            name, operands = op
            if name in SAVES_OUTPUT or (name == "pow" and _tensor_exponent(self, operands, at)):
                return name
        if type(value) is ast.Call:
            layer = self._module_class(value.func)
            if layer in OUTPUT_SAVING_MODULES:
                return f"nn.{layer}"
            returned = module_output_op(analysis, value.func, at)
            if returned is not None:
                return f"{returned}` in `{analysis.segment(value.func)}"
            function = function_value_op(analysis, value.func, at)  # ``self.act = F.relu``
            if function in SAVES_OUTPUT:
                return f"{function}` in `{analysis.segment(value.func)}"
        return None

    def _module_class(self, func: ast.expr) -> str | None:
        """``nn.Linear`` for ``self.fc`` / ``fc`` / ``nn.Linear(3, 4)`` called as a function."""
        constructor = self._constructor(func)
        name = self.analysis.call_name(constructor) if constructor is not None else None
        if name is None or not name.startswith("torch.nn."):
            return None
        return name.rpartition(".")[2]

    def _constructor(self, func: ast.expr) -> ast.Call | None:
        analysis = self.analysis
        if type(func) is ast.Call:
            return func
        values: list[ast.expr] = []
        if type(func) is ast.Name:
            binding = analysis.reaching_binding(func, func)
            if binding is not None and binding.kind == "assign" and binding.value is not None:
                values = [binding.value]
        elif type(func) is ast.Attribute:
            values = [v for v, _ in analysis.self_attribute_values(func, func)]
        calls = [v for v in values if isinstance(v, ast.Call)]
        return calls[0] if len(calls) == 1 and len(values) == 1 else None

    @functools.cached_property
    def _inplace_module_names(self) -> frozenset[str]:
        """The names (variables, attributes, strings) spelled in the statements that pass
        ``inplace=...`` or a literal ``True`` to a call: a module called by another name was
        not built in place there (most files build none; finding a call's constructor is
        not free)."""
        analysis = self.analysis
        flags = [k for k in analysis.by_type.get(ast.keyword, ()) if k.arg == "inplace"]  # type: ignore[attr-defined]
        for constant in analysis.by_type.get(ast.Constant, ()):
            if constant.value is True:  # type: ignore[attr-defined]
                call = analysis.parent(constant)
                if type(call) is ast.Call and any(a is constant for a in call.args):
                    flags.append(constant)  # type: ignore[arg-type]
        names: set[str] = set()
        statements = {id(s): s for f in flags if (s := analysis.enclosing_statement(f)) is not None}
        for statement in statements.values():
            for part in ast.walk(statement):
                if type(part) is ast.Name:
                    names.add(part.id)
                elif type(part) is ast.Attribute:
                    names.add(part.attr)
                elif type(part) is ast.Constant and type(part.value) is str:
                    names.add(part.value)
        return frozenset(names)

    def _inplace_module(self, func: ast.expr) -> bool:
        """``func`` is an ``nn`` activation module built with ``inplace=True``."""
        return self._inplace_flag_position(func) is not None

    def _inplace_flag_position(self, func: ast.expr) -> int | None:
        """The position of the ``inplace`` flag of the module ``func`` names, when its
        constructor passes ``inplace=True`` (by keyword or at that position)."""
        if type(func) is not ast.Call:
            called = func.id if type(func) is ast.Name else getattr(func, "attr", None)
            if called not in self._inplace_module_names:
                return None
        constructor = self._constructor(func)
        if constructor is None:
            return None
        name = self.analysis.call_name(constructor) or ""
        position = (
            INPLACE_MODULES.get(name.rpartition(".")[2]) if name.startswith("torch.nn.") else None
        )
        if position is None:
            return None
        flag = argument_node(constructor, "inplace", position)
        return position if flag is not None and is_true(argument_value(flag)) else None

    def _check_sequential(self, call: ast.Call) -> None:
        """``nn.Sequential(nn.Linear(...), nn.Sigmoid(), nn.ReLU(inplace=True))``."""
        if self.analysis.in_no_grad(call):
            return
        layers = [a for a in call.args if type(a) is not ast.Starred]
        recorded = False
        for previous, layer in zip(layers, layers[1:]):
            recorded = recorded or self.analysis.is_nn_layer(previous, call)
            saver = self._module_class(previous)
            position = self._inplace_flag_position(layer)
            if not recorded or saver not in OUTPUT_SAVING_MODULES or position is None:
                continue
            assert isinstance(layer, ast.Call)
            message = (
                f"`nn.{self._module_class(layer)}(inplace=True)` changes the output of "
                f"`nn.{saver}` in place, but `{OUTPUT_SAVING_MODULES[saver]}` saved it for "
                "backward: backward fails with 'modified by an inplace operation'; drop "
                "`inplace=True`"
            )
            self.report(layer, message, fix=self._drop_flag(layer, position))

    def _drop_flag(self, constructor: ast.Call, position: int) -> FixPlan:
        def build(editor: Editor) -> list[Edit] | None:
            call = editor.node(constructor)
            assert isinstance(call, cst.Call)
            flag = cst_argument(call, "inplace", position)
            if flag is None:
                return None
            args = [a for a in call.args if a is not flag]
            if args:
                args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
            return [Edit(call, call.with_changes(args=args))]

        return self.plan(build, "Drop `inplace=True`")

    def _graph_needed(self, saver: Saver, mutation: Mutation) -> bool:
        """A backward may still run through the saving op after the change: a name that
        holds the graph (the saver's result, what was computed from it, the changed tensor
        itself when the op saved its output) is used after the change."""
        analysis = self.analysis
        scope = analysis.scope_of(mutation.statement).node
        start = analysis.end_index(saver.statement)
        end = analysis.index(mutation.statement)
        if any(start < analysis.index(call) < end for call in _backward_calls(analysis, scope)):
            return False
        holders = set(_bound_names(saver.statement))
        if saver.output:
            holders.add(mutation.name.id)
        for name in self.names.all(scope):
            if name.id in holders and start < analysis.index(name) < end:
                derived = self._derived_holders(name)
                if derived is None:
                    return True  # stored somewhere we cannot follow
                holders |= derived
        statement = mutation.statement
        if type(statement) is ast.AugAssign or type(statement) is ast.Assign:
            value = statement.value  # ``x /= norm``: ``x`` now holds what ``norm`` held
            first, last = analysis.index(value), analysis.end_index(value)
            if any(first <= analysis.index(n) <= last for n in self._holder_names(scope, holders)):
                holders.add(mutation.name.id)
        if mutation.call is not None and type(mutation.statement) is not ast.Expr:
            if type(mutation.statement) in (ast.Return, ast.AugAssign):
                return True
            holders |= set(_bound_names(mutation.statement))
        after = analysis.end_index(mutation.statement)
        return any(
            name.id in holders
            and analysis.index(name) > after
            and classify_read(analysis, name).kind != "nongraph"
            for name in self.names.all(scope)
        )

    def _holder_names(self, scope: ast.AST, holders: set[str]) -> list[ast.Name]:
        return [name for name in self.names.all(scope) if name.id in holders]

    def _derived_holders(self, name: ast.Name) -> set[str] | None:
        """Names that hold what the statement around this read computes from it;
        None when the result goes somewhere else (an attribute, a container, a return)."""
        analysis = self.analysis
        read = classify_read(analysis, name)
        if read.kind == "nongraph":
            return set()
        statement = small_statement(self.analysis, name)
        if type(statement) in (ast.Assign, ast.AugAssign, ast.AnnAssign):
            bound = _bound_names(statement)  # type: ignore[arg-type]
            targets = statement.targets if type(statement) is ast.Assign else []
            if any(type(t) is not ast.Name and type(t) is not ast.Tuple for t in targets):
                return None
            return set(bound)
        if type(statement) is ast.Expr and type(statement.value) is ast.Call:
            func = statement.value.func
            if read.kind == "mutation":
                return set()
            if type(func) is ast.Attribute and type(func.value) is ast.Name:
                return {func.value.id}  # ``losses.append(loss)``
            return set()
        return None

    def _message(self, mutation: Mutation, saver: Saver) -> str:
        where = "" if saver.node is None else f" (line {saver.node.lineno})"
        code = " ".join(self._statement_code(mutation.statement).split())
        if len(code) > 40:
            code = code[:37] + "..."
        return (
            f"`{code}` changes `{mutation.name.id}` in place, but {saver.description} "
            f"for backward{where}: backward fails with 'modified by an inplace "
            "operation'; use the out-of-place form"
        )

    def _statement_code(self, statement: ast.stmt) -> str:
        """The text of ``statement`` as LibCST printed it: with the ``;`` that ends it."""
        code = self.analysis.segment(statement) or ""
        rest = _rest_of_line(self.context.lines, statement)
        after = rest.lstrip(" \t")
        return code + rest[: len(rest) - len(after)] + ";" if after.startswith(";") else code

    # -- fixing ------------------------------------------------------------------------------
    def _fix(self, mutation: Mutation, binding: Binding, proven: bool = False) -> FixPlan | None:
        """``proven``: a run showed the change; whether rebinding keeps the forward results
        is then checked by running the program again instead."""
        if self.analysis.in_no_grad(mutation.statement):
            return None  # out of place under no_grad would cut the graph
        if mutation.form == "module":
            plan = self._module_fix(mutation)
            if plan is None or self._rebindable(mutation, binding):
                return plan
            # aliases, or the caller, no longer see the activation applied to them
            return replace(plan, safety=FixSafety.UNSAFE)
        if self._aliased(binding) is not None:
            return self._alias_clone_fix(mutation, binding)
        if not proven and not self._rebindable(mutation, binding):
            return None
        if not _is_parameter(self, self._root_binding(binding)):
            return self._rebinding_fix(mutation, binding)
        if not self._read_after(mutation):
            return None  # the change is only for the caller, who holds the tensor
        plan = self._rebinding_fix(mutation, binding)
        # this function reads the new value; the caller's tensor is no longer changed
        return None if plan is None else replace(plan, safety=FixSafety.UNSAFE)

    def _alias_clone_fix(self, mutation: Mutation, binding: Binding) -> FixPlan | None:
        """``out = x`` -> ``out = x.clone()`` when ``x`` is only measured after the change
        (its values would no longer show it) and ``out`` names nothing else."""
        analysis = self.analysis
        aliased = self._aliased(binding)
        assert aliased is not None and type(binding.node) is ast.Assign
        if len(binding.node.targets) != 1 or type(binding.node.targets[0]) is not ast.Name:
            return None
        previous = analysis.reaching_binding(aliased, binding.node)
        if previous is None or not self._no_alias_read_after(mutation, binding):
            return None
        scope = analysis.scope_of(mutation.statement).node
        after = analysis.end_index(mutation.statement)
        for read in reads_of(analysis, self.names, previous, scope, after, 1 << 62):
            parent = analysis.parent(read)
            if type(parent) is not ast.Attribute or parent.attr not in METADATA:
                return None

        def build(editor: Editor) -> list[Edit]:
            old = editor.node(aliased)
            assert isinstance(old, cst.Name)
            return [Edit(old, cst.Call(cst.Attribute(old, cst.Name("clone"))))]

        # a parameter: the caller's tensor is no longer changed
        safety = FixSafety.UNSAFE if _is_parameter(self, previous) else None
        description = f"Copy it: `{binding.name} = {aliased.id}.clone()`"
        return self.plan(build, description, safety=safety)

    def _root_binding(self, binding: Binding) -> Binding:
        """The binding that made the tensor: before ``h = F.relu(h, inplace=True)``."""
        for _ in range(5):
            previous = self._changed_in_place_by(binding)
            if previous is None:
                break
            binding = previous
        return binding

    def _rebinding_fix(self, mutation: Mutation, binding: Binding) -> FixPlan | None:
        if mutation.form == "augassign":
            return self._augassign_fix(mutation)
        if mutation.form == "function":
            return self._function_fix(mutation)
        if mutation.form == "method":
            twin = self._twin_fix(mutation) or self._twin_in_expression_fix(mutation)
            if twin is not None:
                return twin
        if type(mutation.statement) in (ast.Assign, ast.AugAssign, ast.Expr):
            return self._clone_fix(mutation)
        return None

    def _rebindable(self, mutation: Mutation, binding: Binding, depth: int = 0) -> bool:
        """Rebinding the name keeps forward results: it holds a fresh tensor bound in this
        scope (or a parameter of the function: see :meth:`_fix`), and no alias of it
        (another name, a view, a container) is read later. ``h = F.relu(h, inplace=True)``
        holds the tensor ``h`` held before: that one must be rebindable too."""
        if _is_parameter(self, binding):
            return self._no_alias_read_after(mutation, binding)
        if binding.kind != "assign" or binding.value is None or binding.unpack_index is not None:
            return False
        previous = self._changed_in_place_by(binding)
        if previous is not None:
            if depth > 4 or not self._rebindable(mutation, previous, depth + 1):
                return False
        elif not self._is_fresh(binding.value, binding.node):
            return False
        return self._no_alias_read_after(mutation, binding)

    def _changed_in_place_by(self, binding: Binding) -> Binding | None:
        """The earlier binding of ``h`` when ``binding`` is ``h = F.relu(h, inplace=True)``
        or ``h = self.act(h)`` with an in-place activation module (the same tensor)."""
        argument = self._in_place_rebinding(binding.node)
        return None if argument is None else self.analysis.reaching_binding(argument, binding.node)

    def _in_place_rebinding(self, statement: ast.AST | None) -> ast.Name | None:
        """The ``h`` passed in ``h = F.relu(h, inplace=True)`` / ``h = self.act(h)`` (an
        in-place activation module): the statement binds ``h`` to the tensor it had."""
        if type(statement) is not ast.Assign or type(statement.value) is not ast.Call:
            return None
        call = statement.value
        if inplace_function(self.analysis, call) is None and not self._inplace_module(call.func):
            return None
        first = first_argument(call)
        if type(first) is not ast.Name or _bound_names(statement) != [first.id]:
            return None
        return first

    def _no_alias_read_after(self, mutation: Mutation, binding: Binding) -> bool:
        analysis = self.analysis
        scope = analysis.scope_of(mutation.statement).node
        end = analysis.index(mutation.statement)
        after = analysis.end_index(mutation.statement)
        loop = _loop_without(self, mutation.statement, binding.node)
        if loop is not None:  # the next iteration comes after the change too
            end, after = analysis.end_index(loop), analysis.index(loop)
        aliases: set[str] = set()
        for read in reads_of(analysis, self.names, binding, scope, binding.end, end):
            if self._rebinds_in_place(read):
                continue  # ``h = self.act(h)``: checked as the next binding of ``h``
            use = classify_read(analysis, read)
            if use.kind == "escape":
                return False
            if use.kind == "alias":
                aliases |= {a.id for a in use.aliases if a.id != binding.name}
        return not any(
            analysis.index(n) > after for alias in aliases for n in self.names.named(scope, alias)
        )

    def _rebinds_in_place(self, read: ast.Name) -> bool:
        """``read`` is the ``h`` of ``h = self.act(h)`` / ``h = F.relu(h, inplace=True)``."""
        call = self.analysis.parent(read)
        statement = self.analysis.parent(call) if type(call) is ast.Call else None
        return self._in_place_rebinding(statement) is read

    def _is_fresh(self, value: ast.expr, at: ast.AST) -> bool:
        """``value`` makes a new tensor, not a view or an alias of another one."""
        analysis = self.analysis
        if type(value) is ast.Call and (
            analysis.call_name(value) in FACTORIES or analysis.is_nn_layer(value.func, at)
        ):
            return True
        if type(value) is ast.Call and self._module_class(value.func) in OUTPUT_SAVING_MODULES:
            return not self._inplace_module(value.func)
        if type(value) is ast.Call:
            returned = module_output_op(analysis, value.func, at)
            if returned is not None:
                return not returned.endswith("_")  # ``relu_``: the module's input itself
        op = analysis.tensor_op(value, at)
        if op is None or op[0] not in TENSOR_OPS or op[0] in MAY_ALIAS_OPS:
            return False
        return not (type(value) is ast.Call and inplace_function(analysis, value))

    def _augassign_fix(self, mutation: Mutation) -> FixPlan | None:
        statement = mutation.statement
        assert isinstance(statement, ast.AugAssign)
        operator = _augmented().get(type(statement.op))
        if operator is None:
            return None
        name = mutation.name.id

        def build(editor: Editor) -> list[Edit]:
            old = editor.node(statement)
            assert isinstance(old, cst.AugAssign)
            new = cst.Assign(
                targets=[cst.AssignTarget(cst.Name(name))],
                value=cst.BinaryOperation(cst.Name(name), operator, _operand(old.value, operator)),
                semicolon=old.semicolon,
            )
            return [Edit(old, new)]

        safety = None if is_constant(self.analysis, statement.value) else FixSafety.UNSAFE
        description = f"Write `{name} = {name} {_symbol(operator)} ...`"
        return self.plan(build, description, safety=safety)

    def _twin_fix(self, mutation: Mutation) -> FixPlan | None:
        """``h.mul_(2).add_(1)`` as a statement -> ``h = h.mul(2).add(1)``."""
        statement = mutation.statement
        if type(statement) is not ast.Expr:
            return None
        chain: list[ast.Call] = []
        expr = statement.value
        while type(expr) is ast.Call and type(expr.func) is ast.Attribute:
            if not is_inplace_method(expr.func.attr):
                return None
            chain.append(expr)
            expr = expr.func.value
        if expr is not mutation.name or not chain:
            return None
        methods = [c.func.attr[:-1] for c in chain]  # type: ignore[attr-defined]
        if any(method not in TWIN_METHODS for method in methods):
            return None
        name = mutation.name.id

        def build(editor: Editor) -> list[Edit]:
            old = editor.node(statement)
            assert isinstance(old, cst.Expr)
            new_value = old.value.visit(_StripUnderscores(_cst_chain(old.value)))
            assert isinstance(new_value, cst.BaseExpression)
            new = cst.Assign(
                targets=[cst.AssignTarget(cst.Name(name))],
                value=new_value,
                semicolon=old.semicolon,
            )
            return [Edit(old, new)]

        keeps_dtype = all(self._keeps_dtype(c) for c in chain)
        listed = ", ".join(f"`{method}`" for method in methods)
        return self.plan(
            build,
            f"Use the out-of-place {listed} and rebind `{name}`",
            safety=None if keeps_dtype else FixSafety.UNSAFE,
        )

    def _twin_in_expression_fix(self, mutation: Mutation) -> FixPlan | None:
        """``return f(h.clamp_(0, 1))`` -> ``return f(h.clamp(0, 1))`` where ``h`` is not
        read after the statement (nothing relies on its change)."""
        call, statement = mutation.call, mutation.statement
        if call is None or type(statement) not in (ast.Assign, ast.Return, ast.Expr):
            return None
        if call.func.value is not mutation.name or self._read_after(mutation):  # type: ignore[attr-defined]
            return None
        method = call.func.attr[:-1]  # type: ignore[attr-defined]
        if method not in TWIN_METHODS:
            return None

        def build(editor: Editor) -> list[Edit]:
            old = editor.node(call)
            assert isinstance(old, cst.Call)
            new = old.visit(_StripUnderscores([old]))
            assert isinstance(new, cst.Call)
            return [Edit(old, new)]

        safety = None if self._keeps_dtype(call) else FixSafety.UNSAFE
        return self.plan(build, f"Use the out-of-place `{method}`", safety=safety)

    def _keeps_dtype(self, call: ast.Call) -> bool:
        method = call.func.attr[:-1]  # type: ignore[attr-defined]
        if method in DTYPE_KEEPING_METHODS:
            return True
        return all(is_constant(self.analysis, value) for value in argument_values(call))

    def _function_fix(self, mutation: Mutation) -> FixPlan | None:
        """``F.relu_(h)`` -> ``h = F.relu(h)``; ``F.relu(h, inplace=True)`` -> ``F.relu(h)``."""
        call, statement = mutation.call, mutation.statement
        assert call is not None
        if first_argument(call) is not mutation.name or not _has_out_of_place(call):
            return None
        name = mutation.name.id
        if type(statement) is ast.Expr and statement.value is call:

            def rebind(editor: Editor) -> list[Edit] | None:
                old = editor.node(statement)
                new_call = _out_of_place_call(editor.node(call))
                if new_call is None or not isinstance(old, cst.Expr):
                    return None
                new = cst.Assign(
                    targets=[cst.AssignTarget(cst.Name(name))],
                    value=new_call,
                    semicolon=old.semicolon,
                )
                return [Edit(old, new)]

            return self.plan(rebind, f"Call it out of place and rebind `{name}`")
        if type(statement) not in (ast.Assign, ast.Return) or statement.value is not call:  # type: ignore[attr-defined]
            return None
        targets = _bound_names(statement)
        if name not in targets and self._read_after(mutation):
            return None  # the caller relies on ``h`` being changed too

        def out_of_place(editor: Editor) -> list[Edit] | None:
            old = editor.node(call)
            new_call = _out_of_place_call(old)
            return None if new_call is None else [Edit(old, new_call)]

        return self.plan(out_of_place, "Call it out of place")

    def _module_fix(self, mutation: Mutation) -> FixPlan | None:
        """``self.act = nn.ReLU(inplace=True)`` used once, on this tensor: drop the flag."""
        call, statement = mutation.call, mutation.statement
        assert call is not None
        position = self._inplace_flag_position(call.func)
        constructor = self._constructor(call.func)
        if position is None or constructor is None or self._module_uses(call.func) != 1:
            return None
        if first_argument(call) is not mutation.name:
            return None
        if type(statement) not in (ast.Assign, ast.Return) or statement.value is not call:  # type: ignore[attr-defined]
            return None
        if mutation.name.id not in _bound_names(statement) and self._read_after(mutation):
            return None
        return self._drop_flag(constructor, position)

    def _module_uses(self, func: ast.expr) -> int:
        """How often the module object ``func`` names is used (``self.act`` in its class,
        a local name in its scope)."""
        analysis = self.analysis
        if type(func) is ast.Name:
            scope = analysis.scope_of(func).node
            return sum(1 for n in self.names.named(scope, func.id) if not _is_assigned(self, n))
        cls = analysis.enclosing_class(func)
        if type(func) is not ast.Attribute or cls is None:
            return 0
        finder = _AttributeUses(func.attr)
        finder.visit(cls)
        return finder.count

    def _read_after(self, mutation: Mutation) -> bool:
        analysis = self.analysis
        scope = analysis.scope_of(mutation.statement).node
        after = analysis.end_index(mutation.statement)
        return any(analysis.index(n) > after for n in self.names.named(scope, mutation.name.id))

    def _clone_fix(self, mutation: Mutation) -> FixPlan | None:
        """``h = h.clone()`` on its own line before the change."""
        statement = mutation.statement
        if not _alone_on_its_lines(self.context.lines, statement):
            return None  # ``a = 1; h[0] = 2``, ``if c: h[0] = 2``
        name = mutation.name.id

        def build(editor: Editor) -> list[Edit] | None:
            line = editor.statement(statement)
            if not isinstance(line, cst.SimpleStatementLine) or len(line.body) != 1:
                return None
            if not isinstance(editor.parent(line), (cst.IndentedBlock, cst.Module)):
                return None
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
            return [Edit(line, replacement)]

        return self.plan(build, f"Change a copy: `{name} = {name}.clone()` before it")


# -- helpers -----------------------------------------------------------------------------------
def _base_name(expr: ast.expr) -> ast.Name | None:
    """``h`` for ``h``, ``h[0]``, ``h[:, 1:]``, ``h.T`` (views changing ``h``)."""
    while type(expr) is ast.Subscript or (type(expr) is ast.Attribute and expr.attr in ("T", "mT")):
        expr = expr.value  # type: ignore[attr-defined]
    return expr if type(expr) is ast.Name else None


def _through_element(mutation: Mutation) -> bool:
    """The change goes through an element of the name (``parts[0].mul_(2)``,
    ``parts[0][1] = v``, ``parts[0] += v``), not the name itself."""
    statement = mutation.statement
    if mutation.form == "index" and type(statement) is ast.Assign:
        target = statement.targets[0]
        return type(target) is ast.Subscript and type(target.value) is ast.Subscript
    if mutation.form == "index":
        return True
    changed = first_argument(mutation.call) if mutation.call is not None else None
    if mutation.form == "method" and mutation.call is not None:
        changed = mutation.call.func.value  # type: ignore[attr-defined]
    return type(changed) is ast.Subscript


def _is_list_display(binding: Binding) -> bool:
    """``xs = [f(a) for a in ...]`` / ``xs = [a, b]``: a list of tensors, not a tensor."""
    value = binding.value
    return (
        binding.kind == "assign"
        and binding.unpack_index is None
        and (type(value) is ast.ListComp or type(value) is ast.List)
    )


def _element_of(target: ast.expr, name: ast.Name) -> bool:
    """``target`` is ``name[i]``: one element of the list ``name``."""
    return type(target) is ast.Subscript and target.value is name


def _is_plain_index(index: ast.expr) -> bool:
    """An index that reads the same twice: names, numbers and arithmetic of them."""
    return all(
        type(node) in (ast.Name, ast.Constant, ast.BinOp, ast.UnaryOp, ast.Load)
        or isinstance(node, (ast.operator, ast.unaryop))
        for node in ast.walk(index)
    )


def _is_parameter(rule: InplaceOnSaved, binding: Binding) -> bool:
    """``binding`` is a plain parameter of a function (not ``*args`` / ``**kwargs``)."""
    if binding.kind != "param" or type(binding.node) is not ast.arg:
        return False
    arguments = rule.analysis.parent(binding.node)
    if type(arguments) is not ast.arguments:
        return False
    return arguments.vararg is not binding.node and arguments.kwarg is not binding.node


def _tensor_exponent(rule: InplaceOnSaved, operands: list[ast.expr], at: ast.AST) -> bool:
    """``x ** y`` with a tensor exponent (or ``2 ** x``) also saves its result."""
    if len(operands) < 2:
        return False
    base, exponent = operands[0], operands[1]
    return is_number_literal(base) or rule.analysis.is_tensor(exponent, at)


def _bound_names(statement: ast.AST) -> list[str]:
    """Names an assignment statement binds (``a = b = ...``, ``a, *b = ...``, ``a += ...``)."""
    targets: list[ast.expr] = []
    if type(statement) is ast.Assign:
        targets = statement.targets
    elif type(statement) is ast.AugAssign or type(statement) is ast.AnnAssign:
        targets = [statement.target]
    names: list[str] = []
    for target in targets:
        if type(target) is ast.Name:
            names.append(target.id)
        elif type(target) is ast.Tuple or type(target) is ast.List:
            elements = [e.value if type(e) is ast.Starred else e for e in target.elts]
            names += [e.id for e in elements if type(e) is ast.Name]
    return names


def _is_assigned(rule: InplaceOnSaved, name: ast.Name) -> bool:
    """``name`` is a whole target of an assignment (``act = ...``)."""
    parent = rule.analysis.parent(name)
    return type(parent) is ast.Assign and any(t is name for t in parent.targets)


class _AttributeUses(ast.NodeVisitor):
    """Reads of ``self.<attr>`` (not assignments to it) in a class."""

    def __init__(self, attr: str) -> None:
        self.attr = attr
        self.count = 0

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            if type(target) is not ast.Attribute:
                self.visit(target)
        self.visit(node.value)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr == self.attr and type(node.value) is ast.Name:
            self.count += node.value.id == "self"
        self.generic_visit(node)


def _backward_calls(analysis: Semantic, scope: ast.AST) -> list[ast.Call]:
    """``x.backward()`` and ``x.grad(...)`` calls anywhere under ``scope``, in order (from
    the analysis's calls by name: no walk)."""
    found: dict[ast.Call, None] = {}
    for name in ("backward", "grad"):
        for call in analysis.calls_named(name):
            func = call.func
            if type(func) is ast.Attribute and func.attr == name and analysis.contains(scope, call):
                found[call] = None
    return sorted(found, key=analysis.index)


def _loop_without(rule: InplaceOnSaved, node: ast.AST, binding: ast.AST) -> ast.AST | None:
    """The outermost loop around ``node`` that does not contain ``binding``."""
    analysis = rule.analysis
    found = None
    for ancestor in analysis.ancestors(node):
        if isinstance(ancestor, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            break
        is_loop = isinstance(ancestor, (ast.For, ast.AsyncFor, ast.While))
        if is_loop and not analysis.contains(ancestor, binding):
            found = ancestor
    return found


def _rest_of_line(lines: list[str], node: ast.AST) -> str:
    """The text after ``node`` on its last line."""
    text = lines[node.end_lineno - 1]  # type: ignore[attr-defined]
    return text.encode("utf-8")[node.end_col_offset :].decode("utf-8", errors="replace")  # type: ignore[attr-defined]


def _alone_on_its_lines(lines: list[str], statement: ast.stmt) -> bool:
    """No other statement nor a compound header shares the lines of ``statement`` (an
    ending ``;`` and a comment may follow it)."""
    first = lines[statement.lineno - 1].encode("utf-8")[: statement.col_offset]
    if first.strip():
        return False
    rest = _rest_of_line(lines, statement).strip()
    if rest.startswith(";"):
        rest = rest[1:].strip()
    return not rest or rest.startswith("#")


def _has_out_of_place(call: ast.Call) -> bool:
    """:func:`_out_of_place_call` can rewrite ``call``: ``F.relu_(h)``, or
    ``F.relu(h, inplace=True)`` with the flag passed by keyword."""
    func = call.func
    if type(func) is ast.Attribute and func.attr.endswith("_"):
        return True
    short = func.attr if type(func) is ast.Attribute else ""
    position = INPLACE_FLAG_POSITIONS.get(short)
    if position is None:
        return False
    return type(argument_node(call, "inplace", position)) is ast.keyword


def _cst_chain(expr: cst.BaseExpression) -> list[cst.Call]:
    """The calls of ``h.mul_(2).add_(1)``, outermost first."""
    chain: list[cst.Call] = []
    while isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute):
        chain.append(expr)
        expr = expr.func.value
    return chain


def _operand(value: cst.BaseExpression, operator: cst.BaseBinaryOp) -> cst.BaseExpression:
    """``value`` as the right operand of ``operator``, parenthesised where needed."""
    if value.lpar:
        return value
    needs = isinstance(
        value, (cst.BooleanOperation, cst.Comparison, cst.IfExp, cst.Lambda, cst.NamedExpr)
    )
    if isinstance(value, cst.BinaryOperation):
        needs = not isinstance(value.operator, _tighter()[type(operator)])
    if isinstance(value, cst.UnaryOperation) and isinstance(value.operator, cst.Not):
        needs = True
    if not needs:
        return value
    return value.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])


def _symbol(operator: cst.BaseBinaryOp) -> str:
    return cst.Module([]).code_for_node(operator).strip()


def _out_of_place_call(call: cst.CSTNode) -> cst.Call | None:
    """``F.relu_(h)`` -> ``F.relu(h)``; ``F.relu(h, inplace=True)`` -> ``F.relu(h)``."""
    if not isinstance(call, cst.Call):
        return None
    func = call.func
    if isinstance(func, cst.Attribute) and func.attr.value.endswith("_"):
        return call.with_changes(func=func.with_changes(attr=cst.Name(func.attr.value[:-1])))
    short = func.attr.value if isinstance(func, cst.Attribute) else ""
    position = INPLACE_FLAG_POSITIONS.get(short)
    if position is None:
        return None
    flag = cst_argument(call, "inplace", position)
    if flag is None or flag.keyword is None:
        return None  # a positional flag: the arguments before it would shift
    args = [a for a in call.args if a is not flag]
    if args:
        args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return call.with_changes(args=args)


@lazy_class
def _StripUnderscores() -> type:
    class StripUnderscores(cst.CSTTransformer):
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

    return StripUnderscores
