"""What torch does, as observed by running it: one source of torch facts.

Generated facts live in :mod:`gradfix.torch_facts.table`, written by
``python -m gradfix.torch_facts.generate`` (which imports torch); reading them does not
import torch, so static checking stays torch-free. Facts no single run of an op can tell
(which calls cut the graph, integer dtypes, factories, view-op names as code spells them)
are curated by hand, once each, in :mod:`gradfix.torch_facts.curated`. Ops are named by
their short name, the union over ``torch``, ``Tensor``, ``torch.nn.functional`` and
``torch.linalg`` (``where`` says which of them have it).

``saves`` is keyed by which tensor arguments required grad (``"self"`` is the first
tensor argument, ``"other"`` the second) and lists what autograd saved for backward
(``"result"``: the op's output)::

    >>> saved_for_backward("exp")
    frozenset({'result'})
    >>> saved_for_backward("mul", requiring=("self",))
    frozenset({'other'})
    >>> inplace_twin("sigmoid"), out_of_place("relu_")
    ('sigmoid_', 'relu')
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from gradfix.torch_facts.curated import (
    AUGMENTED_ASSIGNMENTS,
    BACKWARD_FUNCTIONS,
    CANONICAL,
    ELEMENTWISE,
    FACTORIES,
    FACTORY_FUNCTIONS,
    GRAD_CUTTING_METHODS,
    GRAPH_CUTS,
    INDEX_OPS,
    INPLACE_DUNDERS,
    INTEGER_CASTS,
    INTEGER_DTYPES,
    LAYER_PARAMETERS,
    LIKE_FACTORIES,
    MAY_ALIAS_OPS,
    MAY_RETURN_INPUT,
    MULTI_OUTPUT_VIEW_OPS,
    NN_CONSTANT_INIT_LAYERS,
    NN_CONTAINERS,
    NN_NON_LAYERS,
    NN_PARAMETER_LAYERS,
    NO_GRAD_CONTEXTS,
    NON_GRAPH_ATTRIBUTES,
    NON_GRAPH_CALLS,
    NON_TENSOR_METHODS,
    NON_TENSOR_TORCH,
    NOT_GRAPH_USES,
    NOT_INPLACE,
    OP_NAMESPACES,
    RANDOM_OPS,
    REDUCTIONS,
    SAVED_BY_HAND,
    SAVED_WITH_A_NUMBER,
    SAVES_DIVISOR,
    SAVES_INPUTS,
    SAVES_NOTHING,
    SAVES_OTHER_OPERANDS,
    SAVES_OUTPUT,
    SIZED_FACTORIES,
    TENSOR_FACTORY_METHODS,
    TENSOR_METHODS,
    TENSOR_OPS,
    VALUES_INDICES_OPS,
    VIEW_ATTRIBUTES,
    VIEW_METHODS,
    VIEW_OPS,
    is_inplace_method,
)
from gradfix.torch_facts.table import (
    CRASHED,
    INPLACE_FLAG_POSITIONS,
    MODULES,
    OPS,
    SIGNATURES,
    TORCH_VERSION,
)

__all__ = [
    "AUGMENTED_ASSIGNMENTS",
    "BACKWARD_FUNCTIONS",
    "CANONICAL",
    "CRASHED",
    "ELEMENTWISE",
    "FACTORIES",
    "FACTORY_FUNCTIONS",
    "GRAD_CUTTING_METHODS",
    "GRAPH_CUTS",
    "INDEX_OPS",
    "INPLACE_DUNDERS",
    "INTEGER_CASTS",
    "INPLACE_FLAG_POSITIONS",
    "INTEGER_DTYPES",
    "LAYER_PARAMETERS",
    "LIKE_FACTORIES",
    "MAY_ALIAS_OPS",
    "MAY_RETURN_INPUT",
    "MULTI_OUTPUT_VIEW_OPS",
    "MODULES",
    "NN_CONSTANT_INIT_LAYERS",
    "NN_CONTAINERS",
    "NN_NON_LAYERS",
    "NN_PARAMETER_LAYERS",
    "NON_GRAPH_ATTRIBUTES",
    "NON_GRAPH_CALLS",
    "NON_TENSOR_METHODS",
    "NON_TENSOR_TORCH",
    "NOT_GRAPH_USES",
    "NOT_INPLACE",
    "NO_GRAD_CONTEXTS",
    "OPS",
    "OP_NAMESPACES",
    "RANDOM_OPS",
    "REDUCTIONS",
    "SAVED_BY_HAND",
    "SAVED_WITH_A_NUMBER",
    "SAVES_DIVISOR",
    "SAVES_INPUTS",
    "SAVES_NOTHING",
    "SAVES_OTHER_OPERANDS",
    "SAVES_OUTPUT",
    "SIGNATURES",
    "SIZED_FACTORIES",
    "TENSOR_FACTORY_METHODS",
    "TENSOR_METHODS",
    "VALUES_INDICES_OPS",
    "TENSOR_OPS",
    "TORCH_VERSION",
    "VIEW_ATTRIBUTES",
    "VIEW_METHODS",
    "VIEW_OPS",
    "functional_of_module",
    "inplace_twin",
    "is_inplace_method",
    "is_view",
    "may_return_input",
    "mutates_first_argument",
    "canonical_spellings",
    "nonfinite_grad_points",
    "out_of_place",
    "overflows",
    "saved_for_backward",
]


def canonical_spellings(last_part: Callable[[str], bool]) -> frozenset[str]:
    """The last parts of the names :data:`CANONICAL` maps to a name whose last part passes
    ``last_part``: what a call of such a torch name may also be spelled with
    (``torch.nn.modules.container.Sequential`` -> ``Sequential``)."""
    return frozenset(
        name.rpartition(".")[2]
        for name, canonical in CANONICAL.items()
        if last_part(canonical.rpartition(".")[2])
    )


def _op(name: str) -> dict[str, Any]:
    return OPS.get(name, {})


def saved_for_backward(name: str, requiring: Iterable[str] = ("self",)) -> frozenset[str]:
    """What ``name`` saves for backward when the tensor arguments ``requiring`` (``self``,
    ``other``) require grad; empty when nothing is saved or nothing is known."""
    saves = _op(name).get("saves", {})
    key = ",".join(label for label in ("self", "other") if label in set(requiring))
    return frozenset(saves.get(key, ()))


def mutates_first_argument(name: str) -> bool:
    """``add_``, ``relu_``, ``copy_``: changes the data of its receiver (bumps its version
    counter); ``requires_grad_`` and ``detach_`` do not."""
    return "inplace_of" in _op(name)


def inplace_twin(name: str) -> str | None:
    """``exp`` -> ``exp_``: the in-place form of an out-of-place op."""
    twin = _op(name).get("inplace")
    return twin if isinstance(twin, str) else None


def out_of_place(name: str) -> str | None:
    """``relu_`` -> ``relu``: the out-of-place form of an in-place op (None for ``zero_``,
    ``copy_``, ``uniform_``...)."""
    twin = _op(name).get("inplace_of")
    return twin if isinstance(twin, str) else None


def is_view(name: str) -> bool:
    """Always returns a view of its input (``view``, ``t``, ``select``, ``detach``)."""
    return _op(name).get("view") == "always"


def may_return_input(name: str) -> bool:
    """May return its input or a view of it (``reshape``, ``contiguous``, ``float``)."""
    return _op(name).get("view") in ("always", "sometimes")


def nonfinite_grad_points(name: str) -> tuple[float, ...]:
    """Probed points where a unary pointwise op's gradient is nan or infinite."""
    return tuple(_op(name).get("nonfinite_grad", ()))


def overflows(name: str) -> bool:
    """A large finite input overflows the forward (``exp``, ``cosh``)."""
    return bool(_op(name).get("overflow"))


def functional_of_module(class_name: str) -> tuple[str, bool] | None:
    """``ReLU`` -> ``("relu", True)``: the functional op an ``nn`` module calls and whether
    it has an ``inplace`` flag."""
    entry = MODULES.get(class_name)
    if entry is None:
        return None
    return entry["functional"], "inplace_default" in entry
