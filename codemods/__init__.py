"""gradfix's codemods, one per file; :data:`ALL_RULES` lists them in code order."""

from __future__ import annotations

from gradfix.codemods.leaf_inplace import LeafInplace
from gradfix.codemods.tensor_from_tensors import TensorFromTensors

ALL_RULES = sorted(
    [
        TensorFromTensors,
        LeafInplace,
    ],
    key=lambda rule: rule.code,
)

__all__ = ["ALL_RULES"]
