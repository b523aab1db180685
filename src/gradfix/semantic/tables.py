"""Torch facts the semantic analysis reads: names, factories, what backward saves.

The tables of the old LibCST analysis; issue 12 moves them into :mod:`gradfix.torch_facts`.
"""

from __future__ import annotations

import ast

# Canonical spellings of torch names that have several import paths.
CANONICAL = {
    "torch.nn.parameter.Parameter": "torch.nn.Parameter",
    "torch.nn.modules.module.Module": "torch.nn.Module",
    "torch.autograd.grad_mode.no_grad": "torch.no_grad",
    "torch.autograd.no_grad": "torch.no_grad",
    "torch.autograd.grad_mode.enable_grad": "torch.enable_grad",
    "torch.autograd.grad_mode.inference_mode": "torch.inference_mode",
    "torch.autograd.grad_mode.set_grad_enabled": "torch.set_grad_enabled",
    "torch.functional.F": "torch.nn.functional",
}

#: torch functions that create a new tensor and accept ``requires_grad=``.
FACTORIES = frozenset(
    "torch." + name
    for name in (
        "tensor as_tensor zeros ones empty full rand randn randint arange linspace logspace eye "
        "zeros_like ones_like empty_like full_like rand_like randn_like normal randperm "
        "empty_strided sparse_coo_tensor"
    ).split()
)

#: Tensor methods and torch functions whose result is not a tensor.
NON_TENSOR_METHODS = frozenset(
    "item tolist numpy size dim ndimension numel nelement is_contiguous is_floating_point "
    "is_complex element_size data_ptr stride storage_offset __len__ get_device type "
    "is_leaf requires_grad shape dtype device ndim".split()
)
NON_TENSOR_TORCH = frozenset(
    "torch." + name
    for name in (
        "is_tensor is_storage is_floating_point is_complex numel get_default_dtype "
        "is_grad_enabled is_inference_mode_enabled manual_seed seed initial_seed "
        "set_default_dtype set_grad_enabled no_grad enable_grad inference_mode "
        "device dtype Size finfo iinfo compile jit save load cuda backends "
        "set_printoptions use_deterministic_algorithms equal"
    ).split()
)

#: Attribute names of ``nn`` layers that are parameters.
LAYER_PARAMETERS = frozenset(
    "weight bias weight_ih_l0 weight_hh_l0 bias_ih_l0 bias_hh_l0 in_proj_weight "
    "in_proj_bias".split()
)

#: Calls whose ``with`` block runs with gradients off.
NO_GRAD_CONTEXTS = frozenset({"torch.no_grad", "torch.inference_mode"})

#: Reductions that give a 0-d tensor when called without ``dim``.
REDUCTIONS = frozenset("sum mean prod norm max min std var amax amin logsumexp median".split())
#: Elementwise functions and methods: the result has the shape of the first operand.
ELEMENTWISE = frozenset(
    "exp log log1p log2 log10 sqrt rsqrt sin cos tan tanh sigmoid relu softplus abs neg "
    "square pow clamp clip float double half to sign erf gelu silu elu leaky_relu "
    "reciprocal atan asin acos sinh cosh".split()
)
#: Tensor methods whose result never requires grad.
GRAD_CUTTING_METHODS = frozenset("detach detach_ item tolist numpy argmax argmin".split())
#: Tensor methods that combine the receiver with tensor arguments.
TENSOR_METHODS = frozenset(
    "add sub mul div matmul mm bmm pow where masked_fill expand_as view_as type_as".split()
)

# -- what autograd saves for backward -------------------------------------------------------
# Autograd keeps some operands/results of an op for backward and checks their version
# counters there: an in-place change to a saved tensor, or to any view sharing its storage,
# fails at backward with "one of the variables needed for gradient computation has been
# modified by an inplace operation". Op names are torch / torch.nn.functional / torch.linalg
# function names and tensor method names; the tables follow torch 2.x ``derivatives.yaml``
# and were checked one by one on torch 2.13.

#: Ops that save every tensor operand (``log(x)``, ``x ** 2``, ``2 ** x``, ``atan2(a, b)``).
SAVES_INPUTS = frozenset(
    "log log2 log10 log1p sin cos asin acos atan arcsin arccos arctan sinh cosh asinh acosh "
    "atanh abs absolute pow square erf erfc erfinv lgamma digamma sinc i0 logit atan2 arctan2 "
    "hypot xlogy maximum minimum fmax fmin clamp clip clamp_min clamp_max amax amin prod "
    "cumprod norm vector_norm dist var std logsumexp softplus gelu silu mish elu selu celu "
    "leaky_relu hardtanh relu6 hardswish hardsigmoid logsigmoid softsign normalize layer_norm "
    "group_norm batch_norm".split()
)
#: Ops that save their result (an in-place change to the *result* breaks backward, one to the
#: input does not); ``prod``, ``norm``, ``std``, ``amax``... save both.
SAVES_OUTPUT = frozenset(
    "exp exp2 expm1 tanh sigmoid sqrt rsqrt reciprocal relu tan softmax log_softmax softmin "
    "prod cumprod norm vector_norm std logsumexp amax amin".split()
)
#: Products: an operand is saved when *another* operand requires grad (``x * c`` with a
#: constant ``c`` saves only ``c``; ``x * w`` with ``w`` requiring grad saves both).
SAVES_OTHER_OPERANDS = frozenset(
    "mul multiply matmul mm bmm mv dot vdot inner outer ger cross einsum linear tensordot "
    "kron".split()
)
#: Quotients: the divisor is always saved, the dividend when the divisor requires grad
#: (``x / 2`` saves nothing of ``x``; ``c / x`` saves ``x``).
SAVES_DIVISOR = frozenset("div divide true_divide".split())
#: Differentiable ops that keep only shapes: nothing of theirs can be invalidated.
SAVES_NOTHING = frozenset(
    "add sub subtract neg negative positive sum mean nansum cumsum clone contiguous to float "
    "double half cpu cuda cat concat concatenate stack hstack vstack where flip roll repeat "
    "tile reshape flatten squeeze unsqueeze view view_as expand expand_as t transpose permute "
    "narrow select diagonal movedim moveaxis swapaxes swapdims unfold tril triu floor ceil "
    "round trunc sign".split()
)
#: Ops whose result is a view sharing storage *and version counter* with their first
#: operand: an in-place change through either one is seen by the other's saved copies.
#: (``detach()`` cuts the graph but shares the version counter; ``reshape``/``flatten``/
#: ``contiguous`` copy only sometimes and are left out.)
VIEW_OPS = frozenset(
    "view view_as t transpose swapaxes swapdims permute movedim moveaxis unsqueeze squeeze "
    "narrow select expand expand_as diagonal unfold as_strided detach".split()
)
#: Attributes of a tensor that are views of it.
VIEW_ATTRIBUTES = frozenset("T mT H mH real imag".split())
#: Python operators -> the torch op they call.
BINARY_OPS: dict[type[ast.operator], str] = {
    ast.Add: "add",
    ast.Sub: "sub",
    ast.Mult: "mul",
    ast.Div: "div",
    ast.Pow: "pow",
    ast.MatMult: "matmul",
}
UNARY_OPS: dict[type[ast.unaryop], str] = {ast.USub: "neg", ast.UAdd: "positive"}
#: Where the torch functions of the tables live.
OP_NAMESPACES = ("torch.", "torch.nn.functional.", "torch.linalg.")
#: Every op name known to return one tensor.
TENSOR_OPS = (
    SAVES_INPUTS | SAVES_OUTPUT | SAVES_OTHER_OPERANDS | SAVES_DIVISOR | SAVES_NOTHING | VIEW_OPS
)

#: ``nn`` containers: calling one runs the layers it holds.
NN_CONTAINERS = frozenset("torch.nn." + name for name in "Sequential ModuleList ModuleDict".split())
NN_NON_LAYERS = frozenset(
    "Module ModuleList ModuleDict Sequential ParameterList ParameterDict Parameter "
    "Identity Flatten Unflatten Dropout ReLU GELU Tanh Sigmoid Softmax".split()
)
