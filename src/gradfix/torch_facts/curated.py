"""Torch facts written by hand: what the generator cannot tell by running one op.

Each table has ONE definition here; the rules, the family modules and the trace import it
from :mod:`gradfix.torch_facts`. Where two hand-written copies used to disagree, the entry
says which way it was settled, checked against torch 2.13 for autograd.
"""

from __future__ import annotations

#: The augmented assignments that change a tensor target in place (``h %= 0.5`` calls
#: ``__imod__``): every Python one but ``@=``, for which a tensor has no ``__imatmul__``, so
#: ``a @= b`` rebinds ``a`` to ``a @ b``. Rules build their prefilters from this list.
AUGMENTED_ASSIGNMENTS = tuple("+= -= *= /= //= %= **= &= |= ^= <<= >>=".split())
#: The tensor dunders those call (``__iadd__`` ... ``__irshift__``).
INPLACE_DUNDERS = frozenset(
    f"__i{op}__" for op in "add sub mul truediv floordiv mod pow and or xor lshift rshift".split()
)

#: Tensor methods ending in ``_`` that change no values (no version bump, nothing saved for
#: backward goes stale). ``pin_memory_``, ``retain_grad_`` and ``record_stream_`` are not
#: tensor methods in torch 2.13: a call raises AttributeError, not an autograd error, so
#: they are not reported as in-place changes either.
NOT_INPLACE = frozenset(
    "requires_grad_ share_memory_ detach_ record_stream_ retain_grad_ pin_memory_".split()
)


def is_inplace_method(name: str) -> bool:
    """``add_``, ``clamp_``, ``copy_``: a tensor method that changes its receiver."""
    return name.endswith("_") and not name.startswith("_") and name not in NOT_INPLACE


#: Tensor methods and attributes that return no tensor (sizes, flags, Python numbers).
NON_TENSOR_METHODS = frozenset(
    "item tolist numpy size dim ndimension numel nelement is_contiguous is_floating_point "
    "is_complex element_size data_ptr stride storage_offset __len__ get_device type "
    "is_leaf requires_grad shape dtype device ndim".split()
)
#: Tensor attributes and methods whose result holds none of the tensor's data and no graph
#: (the above, the gradient and hooks): reading them neither puts the tensor in the graph
#: nor hands an alias of it on.
NON_GRAPH_ATTRIBUTES = NON_TENSOR_METHODS | frozenset(
    "is_cuda grad grad_fn register_hook retain_grad".split()
)
#: Attributes of a leaf whose use is no graph use although they hand the tensor (or its
#: data) on: ``detach`` and ``data`` are aliases autograd does not record,
#: ``requires_grad_`` returns the leaf itself.
NOT_GRAPH_USES = NON_GRAPH_ATTRIBUTES | {"data", "detach", "requires_grad_"}

#: Builtins whose result holds no tensor: passing a tensor to them is no graph use and
#: hands no alias on. ``list``, ``tuple``, ``zip``, ``sorted``, ``enumerate``, ``set``,
#: ``dict`` are not here: they iterate the tensor, and each row is a view of it recorded in
#: its graph (``list(w)`` gives ``UnbindBackward`` rows); nor ``getattr``/``setattr``,
#: which return or store the tensor or a view of it.
NON_GRAPH_CALLS = frozenset(
    "print len id type isinstance repr str format hasattr bool int float".split()
)

#: dtypes that cannot require gradients: ``torch.zeros(2, dtype=torch.bool)
#: .requires_grad_()`` raises "only Tensors of floating point dtype can require gradients"
#: as for the integer dtypes (complex dtypes can).
INTEGER_DTYPES = frozenset(
    "torch." + name
    for name in ("uint8 uint16 uint32 uint64 int8 int16 short int32 int int64 long bool").split()
)

#: torch functions that create a new tensor from sizes, values or another tensor's layout:
#: the result shares no storage and no graph with their arguments.
FACTORY_FUNCTIONS = frozenset(
    "tensor as_tensor scalar_tensor zeros ones empty full rand randn randint randperm arange "
    "range linspace logspace eye normal empty_strided sparse_coo_tensor zeros_like ones_like "
    "empty_like full_like rand_like randn_like".split()
)
#: The same, as qualified names (``torch.zeros``).
FACTORIES = frozenset("torch." + name for name in FACTORY_FUNCTIONS)
#: Ops that draw from torch's random number generator: the samplers (functions, tensor
#: methods and in-place fillers) and the ops that sample a mask or a slope when training
#: (``dropout``, ``rrelu``). Evaluating one once more, or at another point of the program,
#: changes what every later draw gives. ``nn`` layers are matched by their functional op
#: (:func:`functional_of_module`: ``nn.Dropout`` -> ``dropout``).
RANDOM_OPS = frozenset(
    "rand randn randint randperm rand_like randn_like randint_like normal bernoulli "
    "multinomial poisson binomial normal_ uniform_ bernoulli_ cauchy_ exponential_ "
    "geometric_ log_normal_ random_ dropout dropout1d dropout2d dropout3d alpha_dropout "
    "feature_alpha_dropout feature_dropout native_dropout rrelu rrelu_ gumbel_softmax "
    "fractional_max_pool2d fractional_max_pool3d".split()
)
#: Tensor methods that create a new tensor with the receiver's dtype and device.
TENSOR_FACTORY_METHODS = frozenset("new_tensor new_zeros new_ones new_full new_empty".split())
#: ``torch.zeros(3)``-like factories whose positional arguments are the size.
SIZED_FACTORIES = frozenset("torch." + n for n in "zeros ones empty rand randn".split())
#: ``torch.zeros_like(x)``-like factories: the result has the layout of the first argument.
LIKE_FACTORIES = frozenset(
    "torch." + n for n in "zeros_like ones_like empty_like rand_like randn_like full_like".split()
)

#: Ops whose result is always a view sharing storage with their input.
VIEW_OPS = frozenset(
    "view view_as t transpose swapaxes swapdims permute movedim moveaxis unsqueeze squeeze "
    "narrow select expand expand_as diagonal unfold as_strided detach".split()
)
#: Tensor methods giving a view that code may not mean to share (GF206): ``detach`` is how
#: code asks for the storage on purpose.
VIEW_METHODS = VIEW_OPS - {"detach"}
#: Ops that hand back their operand itself when nothing needs changing (``x.float()`` on a
#: float tensor, ``x.reshape(...)`` of a contiguous one).
MAY_RETURN_INPUT = frozenset(
    "to float double half cpu cuda contiguous reshape flatten type_as".split()
)
#: Ops whose result may share storage with their operand: views, tuples of views
#: (``chunk``, ``split``, ``unbind``) and ops that may return the operand itself.
MAY_ALIAS_OPS = VIEW_OPS | MAY_RETURN_INPUT | frozenset("chunk split unbind tensor_split".split())
#: Ops returning several views that autograd forbids changing in place while their base
#: requires grad ("Output 1 of Split is a view and is being modified inplace. This view is
#: the output of a function that returns multiple views"). ``tensor_split``, ``hsplit``,
#: ``unsafe_split`` and ``unsafe_chunk`` return plain slices: changing them is allowed.
MULTI_OUTPUT_VIEW_OPS = frozenset("chunk split split_with_sizes unbind".split())

#: Calls (short name) that turn a tensor that requires grad into a constant, with the rule
#: that reports the cut: copying the values (GF101) or detaching (GF104).
GRAPH_CUTS = {
    "tensor": "GF101",
    "as_tensor": "GF101",
    "new_tensor": "GF101",
    "item": "GF101",
    "tolist": "GF101",
    "numpy": "GF101",
    "detach": "GF104",
    "__float__": "GF101",
    "__int__": "GF101",
}

# -- names, grad mode, layers ---------------------------------------------------------------

#: The functions that run a backward pass, besides the method ``Tensor.backward``.
BACKWARD_FUNCTIONS = frozenset({"torch.autograd.grad", "torch.autograd.backward"})

#: Canonical spellings of torch names that have several import paths.
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
#: Where the torch functions named by their short name live (see :mod:`gradfix.torch_facts`).
OP_NAMESPACES = ("torch.", "torch.nn.functional.", "torch.linalg.")
#: torch functions whose result is not a tensor (flags, dtypes, modules, contexts).
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
#: Calls whose ``with`` block runs with gradients off.
NO_GRAD_CONTEXTS = frozenset({"torch.no_grad", "torch.inference_mode"})
#: Attribute names of ``nn`` layers that are parameters.
LAYER_PARAMETERS = frozenset(
    "weight bias weight_ih_l0 weight_hh_l0 bias_ih_l0 bias_hh_l0 in_proj_weight "
    "in_proj_bias".split()
)
#: ``nn`` containers: calling one runs the layers it holds.
NN_CONTAINERS = frozenset("torch.nn." + name for name in "Sequential ModuleList ModuleDict".split())
#: ``nn`` classes that are no layer with parameters of its own.
NN_NON_LAYERS = frozenset(
    "Module ModuleList ModuleDict Sequential ParameterList ParameterDict Parameter "
    "Identity Flatten Unflatten Dropout ReLU GELU Tanh Sigmoid Softmax".split()
)

#: ``nn`` layer classes that own parameters when built with their defaults -> the
#: ``(keyword, position)`` of the flag that builds them without any (None: always
#: parameters). ``InstanceNorm*`` (``affine=False`` by default) is left out.
#: ``tests/test_torch_facts.py`` builds each one to check it.
NN_PARAMETER_LAYERS: dict[str, tuple[str, int] | None] = {
    **dict.fromkeys(
        "Linear LazyLinear Bilinear Embedding EmbeddingBag PReLU MultiheadAttention "
        "RNN LSTM GRU RNNCell LSTMCell GRUCell Transformer TransformerEncoderLayer "
        "TransformerDecoderLayer".split()
    ),
    **dict.fromkeys(
        f"{lazy}{kind}{n}d"
        for lazy in ("", "Lazy")
        for kind in ("Conv", "ConvTranspose")
        for n in (1, 2, 3)
    ),
    **dict.fromkeys("BatchNorm1d BatchNorm2d BatchNorm3d SyncBatchNorm".split(), ("affine", 3)),
    "GroupNorm": ("affine", 3),
    "LayerNorm": ("elementwise_affine", 2),
    "RMSNorm": ("elementwise_affine", 2),
}

#: ``NN_PARAMETER_LAYERS`` whose ``reset_parameters`` sets constants, not random numbers
#: -> what a new one holds: the normalisation layers start at weight 1 and bias 0,
#: ``RMSNorm`` (no bias) at weight 1, ``PReLU`` at its ``init`` (0.25). The others draw
#: random weights. ``tests/test_torch_facts.py`` builds each one to check it.
NN_CONSTANT_INIT_LAYERS: dict[str, str] = {
    **dict.fromkeys(
        "BatchNorm1d BatchNorm2d BatchNorm3d SyncBatchNorm GroupNorm LayerNorm".split(),
        "weight 1, bias 0",
    ),
    "RMSNorm": "weight 1",
    "PReLU": "weight `init`, 0.25 by default",
}

#: Ops (torch functions and tensor methods) whose result is integer indices into their
#: tensor input: no gradient flows through them back to the input.
INDEX_OPS = frozenset("argmax argmin argsort nonzero bucketize searchsorted".split())
#: Tensor methods that cast to an integer or bool dtype: the result has no gradient.
INTEGER_CASTS = frozenset("long int short byte bool".split())
#: Ops returning ``(values, indices)`` when given a dimension (``torch.max(x, 1)[1]``).
VALUES_INDICES_OPS = frozenset("max min sort topk kthvalue mode median".split())

# -- shapes and graph flow of ops -----------------------------------------------------------

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
#: Attributes of a tensor that are views of it.
VIEW_ATTRIBUTES = frozenset("T mT H mH real imag".split())

# -- what autograd saves for backward, as op families ---------------------------------------
# What an op saves is generated (``saved_for_backward``), and the semantic analysis answers
# from it; these hand families stay for the ops the generator cannot call on its 3x3 inputs
# (see ``SAVED_BY_HAND``), for the op names the rules read as families (ops that make a
# fresh tensor, ops that build a graph) and for ``TENSOR_OPS``. Where they disagree with
# the generated facts (``python bench/saved_facts_compare.py``: ``pow`` of two tensors
# also saves its result, ``hypot`` an operand only when it requires grad, ``kron`` saves
# copies), torch 2.13 agrees with the generated ones; ``kron`` stays a product here for the
# rules that read the families as "makes a fresh tensor".

#: Ops that save every tensor operand (``log(x)``, ``x ** 2``, ``2 ** x``, ``atan2(a, b)``).
SAVES_INPUTS = frozenset(
    "log log2 log10 log1p sin cos asin acos atan arcsin arccos arctan sinh cosh asinh acosh "
    "atanh abs absolute pow square erf erfc erfinv lgamma digamma sinc i0 logit atan2 arctan2 "
    "hypot xlogy maximum minimum fmax fmin clamp clip clamp_min clamp_max amax amin prod "
    "cumprod norm vector_norm dist var std logsumexp softplus gelu silu mish elu selu celu "
    "leaky_relu hardtanh relu6 hardswish hardsigmoid logsigmoid softsign normalize layer_norm "
    "group_norm batch_norm nansum".split()
)
#: Ops that save their result (an in-place change to the *result* breaks backward, one to the
#: input does not); ``prod``, ``norm``, ``std``, ``amax``... save both.
SAVES_OUTPUT = frozenset(
    "exp exp2 expm1 tanh sigmoid sqrt rsqrt reciprocal relu tan softmax log_softmax softmin "
    "prod cumprod norm vector_norm std logsumexp amax amin dist hypot".split()
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
    "add sub subtract neg negative positive sum mean cumsum clone contiguous to float "
    "double half cpu cuda cat concat concatenate stack hstack vstack where flip roll repeat "
    "tile reshape flatten squeeze unsqueeze view view_as expand expand_as t transpose permute "
    "narrow select diagonal movedim moveaxis swapaxes swapdims unfold tril triu floor ceil "
    "round trunc sign".split()
)
#: Every op name known to return one tensor.
TENSOR_OPS = (
    SAVES_INPUTS | SAVES_OUTPUT | SAVES_OTHER_OPERANDS | SAVES_DIVISOR | SAVES_NOTHING | VIEW_OPS
)
#: Ops of the families above whose savings the generator cannot observe, so the families
#: answer for them: it calls each op on 3x3 inputs, and these need 1-D or 3-D operands
#: (``dot vdot outer ger mv bmm``), an equation string (``einsum``) or running statistics
#: (``batch_norm``); and on a 3x3 leaf these return the leaf itself, with no ``grad_fn``
#: to read (``to contiguous cpu cuda double positive``) or no graph (``detach``).
SAVED_BY_HAND = frozenset(
    "dot vdot outer ger mv bmm einsum batch_norm to contiguous cpu cuda double positive "
    "detach".split()
)
#: What an op saves when one operand is a Python number (op, that operand's label ->
#: what is saved): another overload runs than the tensor-tensor one the generator calls.
#: ``x ** 2`` (``pow.Tensor_Scalar``) saves only ``x``; ``2 ** x`` saves ``x`` and the
#: result; ``2 / x`` runs ``x.reciprocal() * 2``, which saves a fresh reciprocal, not
#: ``x``; ``x / 2`` saves nothing. Checked on torch 2.13 by changing each in place.
SAVED_WITH_A_NUMBER: dict[tuple[str, str], frozenset[str]] = {
    ("pow", "other"): frozenset({"self"}),
    ("pow", "self"): frozenset({"other", "result"}),
    ("div", "self"): frozenset(),
    ("div", "other"): frozenset(),
}


# --- autograd's error messages ------------------------------------------------------------
#: A stable part of each message autograd raises for a pitfall (the catalog in pitfalls.md
#: quotes them; stable across releases): what ``gradfix trace`` reads a failure as, and
#: what the verifier matches an error a fix repairs by.
LEAF_INPLACE = "a leaf Variable that requires grad is being used in an in-place operation"
VIEW_OF_LEAF_INPLACE = "a view of a leaf Variable that requires grad is being used in an in-place"
INTEGER_GRAD = "only Tensors of floating point"
INPLACE_SAVED = "modified by an inplace operation"
MULTI_VIEW_INPLACE = "is a view and is being modified inplace"
BACKWARD_TWICE = "backward through the graph a second time"
NO_GRAD_FN = "does not require grad and does not have a grad_fn"
