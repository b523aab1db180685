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
