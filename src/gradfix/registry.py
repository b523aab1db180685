"""Which rules run: ``--select`` / ``--ignore`` resolution and rule lookup.

Selectors are rule codes (``GF101``), code prefixes (``GF1``, ``GF``), ``ALL`` or kebab rule
names (``tensor-from-tensors``), case-insensitive, comma-separated, options repeatable.
Resolution follows ruff: for each rule, the most specific matching selector decides (a
longer prefix beats a shorter one, ``ALL`` is the least specific) and on a tie ``--ignore``
wins. Without ``--select`` the rules with ``default_enabled`` are selected; ``--select``
also enables rules that are off by default.

    select_rules(select=["GF2"], ignore=["GF202"])   # GF201 and any other GF2xx rule

The codemods (and LibCST) are imported on first use, so importing this module is cheap.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gradfix.rule import Rule
    from gradfix.verify.intent import FixIntent

ALL_SELECTOR = "ALL"
#: the implicit selector of default rules when ``--select`` is not given
_DEFAULT_SPECIFICITY = -1


class SelectionError(ValueError):
    """A selector matches no rule. ``str()`` is a one-line message."""


@dataclass(frozen=True)
class Selector:
    text: str  # upper case

    def specificity(self, rule: type[Rule]) -> int | None:
        """How precisely this selector names ``rule`` (``None``: it does not match it)."""
        if self.text == ALL_SELECTOR:
            return 0
        if rule.code.upper().startswith(self.text):
            return len(self.text)
        if rule.name.upper() == self.text:
            return len(rule.code)  # a name is as precise as the full code
        return None


def all_rules() -> list[type[Rule]]:
    """Every rule gradfix knows, in code order."""
    from gradfix.codemods import ALL_RULES

    return list(ALL_RULES)


def parse_selectors(
    values: Iterable[str] | None, rules: Sequence[type[Rule]], option: str = "--select"
) -> list[Selector]:
    """Split comma-separated ``values`` into selectors; reject one that matches no rule."""
    selectors = []
    for value in values or ():
        for token in value.split(","):
            text = token.strip().upper()
            if not text:
                continue
            selector = Selector(text)
            if all(selector.specificity(rule) is None for rule in rules):
                raise SelectionError(
                    f"unknown rule code or prefix {token.strip()!r} in {option}"
                    " (run `gradfix rules` to list them)"
                )
            selectors.append(selector)
    return selectors


#: where ``select`` and ``ignore`` come from, as errors name them
COMMAND_LINE = ("--select", "--ignore")


def select_rules(
    select: Iterable[str] | None = None,
    ignore: Iterable[str] | None = None,
    rules: Sequence[type[Rule]] | None = None,
    sources: tuple[str, str] = COMMAND_LINE,
) -> list[type[Rule]]:
    """The rules to run, in code order; raise :class:`SelectionError` on unknown codes,
    naming ``sources`` (where ``select`` / ``ignore`` came from)."""
    known = all_rules() if rules is None else list(rules)
    selected = parse_selectors(select, known, sources[0])
    ignored = parse_selectors(ignore, known, sources[1])
    return [rule for rule in known if _is_selected(rule, selected, ignored)]


def _is_selected(rule: type[Rule], selected: list[Selector], ignored: list[Selector]) -> bool:
    if selected:
        select_level = _best(rule, selected)
    else:
        select_level = _DEFAULT_SPECIFICITY if rule.default_enabled else None
    if select_level is None:
        return False
    ignore_level = _best(rule, ignored)
    return ignore_level is None or ignore_level < select_level


def _best(rule: type[Rule], selectors: list[Selector]) -> int | None:
    levels = [s.specificity(rule) for s in selectors]
    return max((level for level in levels if level is not None), default=None)


def find_rule(code_or_name: str, rules: Sequence[type[Rule]] | None = None) -> type[Rule]:
    """The rule with this code (``GF101``, any case) or kebab name."""
    wanted = code_or_name.strip()
    for rule in all_rules() if rules is None else rules:
        if rule.code.upper() == wanted.upper() or rule.name == wanted.lower():
            return rule
    raise SelectionError(f"unknown rule {wanted!r} (run `gradfix rules` to list them)")


def fix_intent(codes: Iterable[str]) -> FixIntent:
    """What the fixes of these rules (codes) declare (:mod:`gradfix.verify.intent`); an
    unknown code (a rule of a test) declares nothing."""
    from gradfix.trace import errors
    from gradfix.verify.intent import FixIntent

    wanted = {str(code).upper() for code in codes}
    rules = [rule for rule in all_rules() if rule.code.upper() in wanted]
    needles = {
        "view-leaf-inplace": errors.VIEW_OF_LEAF_INPLACE,
        "leaf-inplace": errors.LEAF_INPLACE,
        "integer-grad": errors.INTEGER_GRAD,
        "inplace-saved": errors.INPLACE_SAVED,
        "view-inplace": errors.MULTI_VIEW_INPLACE,
        "backward-twice": errors.BACKWARD_TWICE,
        "no-grad-fn": errors.NO_GRAD_FN,
    }
    repairs = sorted(needles[kind] for kind, code in errors.CODES.items() if code in wanted)
    return FixIntent(
        codes=tuple(sorted(wanted)),
        restores_gradient=any(rule.fix_restores_gradient for rule in rules),
        changes_training=any(rule.fix_changes_training for rule in rules),
        drops_leaves=any(rule.fix_drops_leaves for rule in rules),
        differentiates_gradients=any(rule.fix_differentiates_gradients for rule in rules),
        repairs=tuple(repairs),
    )
