"""The hand ``SAVES_*`` families of :mod:`gradfix.torch_facts.curated` against the generated
``saved_for_backward`` facts: every op name of the hand tables, every choice of operands
requiring grad, and each disagreement.

    python bench/saved_facts_compare.py

The hand model, per table: ``SAVES_INPUTS`` saves every tensor operand; ``SAVES_OTHER_
OPERANDS`` saves an operand when another one requires grad; ``SAVES_DIVISOR`` saves the
divisor, and the dividend when the divisor requires grad; ``SAVES_OUTPUT`` saves the result;
``SAVES_NOTHING`` and ``VIEW_OPS`` save nothing. Operands are labelled as the generator
labels them: ``self`` (first tensor), ``other`` (second), ``result``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from gradfix import torch_facts as facts  # noqa: E402
from gradfix.torch_facts import curated as tables  # noqa: E402

LABELS = ("self", "other")


def hand_saved(name: str, requiring: tuple[str, ...], arity: int) -> set[str] | None:
    """What the hand tables say ``name`` saves, None when no hand table has it."""
    operands = LABELS[:arity]
    saved: set[str] = set()
    known = False
    if name in getattr(tables, "SAVES_INPUTS", ()):
        saved |= set(operands)
        known = True
    if name in getattr(tables, "SAVES_OTHER_OPERANDS", ()):
        saved |= {o for o in operands if set(requiring) - {o}}
        known = True
    if name in getattr(tables, "SAVES_DIVISOR", ()) and arity == 2:
        saved |= {"self", "other"} if "other" in requiring else {"other"}
        known = True
    if name in getattr(tables, "SAVES_OUTPUT", ()):
        saved.add("result")
        known = True
    if name in getattr(tables, "SAVES_NOTHING", ()) or name in facts.VIEW_OPS:
        known = True
    return saved if known else None


def hand_names() -> set[str]:
    names: set[str] = set(facts.VIEW_OPS)
    for table in "INPUTS OUTPUT OTHER_OPERANDS DIVISOR NOTHING".split():
        names |= set(getattr(tables, f"SAVES_{table}", ()))
    return names


def disagreements() -> list[str]:
    lines = []
    for name in sorted(hand_names()):
        generated = facts.OPS.get(name, {}).get("saves")
        if not generated:
            lines.append(f"{name:14} -: no generated saves facts")
            continue
        arity = 2 if any("other" in key for key in generated) else 1
        for key in sorted(generated):
            requiring = tuple(key.split(","))
            hand = hand_saved(name, requiring, arity)
            observed = set(facts.saved_for_backward(name, requiring))
            if hand != observed:
                hand_text = "?" if hand is None else ",".join(sorted(hand)) or "-"
                torch_text = ",".join(sorted(observed)) or "-"
                lines.append(f"{name:14} {key:11} hand {hand_text:18} torch {torch_text}")
    return lines


if __name__ == "__main__":
    for line in disagreements():
        print(line)
