"""Autograd's error messages, read: which pitfall an exception is, and its details.

PyTorch's messages are stable across releases (the catalog in pitfalls.md quotes them);
each pattern here is one of them. Pure functions, no torch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gradfix.torch_facts.curated import (  # noqa: F401 - the messages, read here
    BACKWARD_TWICE,
    INPLACE_SAVED,
    INTEGER_GRAD,
    LEAF_INPLACE,
    MULTI_VIEW_INPLACE,
    NO_GRAD_FN,
    VIEW_OF_LEAF_INPLACE,
)

#: The rule whose fix applies to each kind of error, when nothing more precise is known.
CODES = {
    "view-leaf-inplace": "GF206",
    "leaf-inplace": "GF201",
    "integer-grad": "GF105",
    "inplace-saved": "GF204",
    "view-inplace": "GF204",
    "backward-twice": "GF401",
    "no-grad-fn": "GF101",
}

_BACKWARD_SUFFIX = re.compile(r"Backward\d*$")
_SAVED = re.compile(
    r"\[torch\.\w+ \[(?P<shape>[\d, ]*)\]\](?:, which is output (?P<output>\d+) of "
    r"(?:\w+::)*(?P<producer>\w+),)? is at version (?P<version>\d+); "
    r"expected version (?P<expected>\d+)"
)


def kind_of(message: str) -> str | None:
    """The pitfall an autograd error message names, or None for any other error."""
    lowered = message.lower()
    for needle, kind in (
        (VIEW_OF_LEAF_INPLACE, "view-leaf-inplace"),
        (LEAF_INPLACE, "leaf-inplace"),
        (INTEGER_GRAD, "integer-grad"),
        (INPLACE_SAVED, "inplace-saved"),
        (MULTI_VIEW_INPLACE, "view-inplace"),
        (BACKWARD_TWICE, "backward-twice"),
        (NO_GRAD_FN, "no-grad-fn"),
    ):
        if needle.lower() in lowered:
            return kind
    return None


@dataclass(frozen=True)
class SavedTensorError:
    """The details of "modified by an inplace operation": the tensor autograd saved (its
    shape and, for a non-leaf, the node that produced it) and its versions."""

    shape: tuple[int, ...]
    producer: str | None
    version: int
    expected: int


def parse_saved_tensor_error(message: str) -> SavedTensorError | None:
    """``[torch.FloatTensor [3]], which is output 0 of SigmoidBackward0, is at version 1;
    expected version 0 instead`` -> shape (3,), producer SigmoidBackward0, 1, 0."""
    match = _SAVED.search(message)
    if match is None:
        return None
    shape = tuple(int(n) for n in match["shape"].replace(" ", "").split(",") if n)
    return SavedTensorError(shape, match["producer"], int(match["version"]), int(match["expected"]))


def same_op(node_name: str | None, named: str | None) -> bool:
    """Whether autograd's name for an op (``Sigmoid``, older ``SigmoidBackward0``) is the
    node ``node_name`` (``SigmoidBackward0``); two Nones (a leaf) match."""
    if node_name is None or named is None:
        return node_name is None and named is None
    return _BACKWARD_SUFFIX.sub("", node_name) == _BACKWARD_SUFFIX.sub("", named)
