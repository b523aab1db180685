"""Property-based tests: generated variants of every rule's pattern.

The seeds are each rule's embedded INVALID examples and its ``fixtures/<module>/*.before.py``
files; tests/variants.py renames user identifiers, imports torch under other names or
forms, nests the code (function, method, ``if``, ``for``, ``with``), reformats it and adds
comments, all without changing what the code does. On every variant:

1. found: the rule reports it, as often as on the seed and with as many fixes, unless the
   nesting reshaped the code: a new block around part of a block or around a loop's body,
   or a loop (that runs once, which no static analysis can know) may rightly change what a
   rule can prove (``b.backward()`` under ``if True:`` may not run; a loop body that was
   one assignment is no longer one). Reshaped variants still go through 2-5;
2. fixed: the fixes apply, the result parses, no fixable finding of the rule is left;
3. idempotent: fixing the fixed text changes nothing;
4. keeps comments and formatting: every comment survives, and each fix pass changes only
   the lines of the nodes its fixes replace (plus the imports it adds);
5. commutes with renaming and aliasing: ``fix(rename(v)) == rename(fix(v))`` (up to the
   names a fix makes up itself) and ``fix(alias(v)) == alias(fix(v))`` — a fix that emits
   torch code spells it with the file's alias.

Runs are reproducible: every test uses the same fixed seed (so the four tests on one rule
see the same variants and share the cached lint results). Explore more with
``GRADFIX_PROPERTY_EXAMPLES=200 GRADFIX_PROPERTY_SEED=random pytest tests/test_properties.py``.
"""

from __future__ import annotations

import ast
import functools
import os
import re
from collections import Counter
from collections.abc import Sequence

import libcst as cst
import pytest
from hypothesis import HealthCheck, Phase, assume, given, seed, settings
from hypothesis import strategies as st
from libcst.metadata import MetadataWrapper, WhitespaceInclusivePositionProvider
from variants import (
    Seed,
    Variant,
    alias_plans,
    apply_aliases,
    comments,
    identifiers,
    rename,
    renamings,
    variants,
)

from gradfix.engine import LintResult, collect_reports, lint_source
from gradfix.registry import all_rules
from gradfix.rule import Finding, FixPlan, Rule

RULES = all_rules()
EXAMPLES = int(os.environ.get("GRADFIX_PROPERTY_EXAMPLES", "5"))
SEED = os.environ.get("GRADFIX_PROPERTY_SEED", "6")
SHRINK = os.environ.get("GRADFIX_PROPERTY_SHRINK") != "0"

SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    # GRADFIX_PROPERTY_SHRINK=0 when exploring: report failures as found, unshrunk
    phases=[p for p in Phase if p is not Phase.shrink or SHRINK],
)


def reproducible(test):  # type: ignore[no-untyped-def]
    """One fixed seed for every test (unless GRADFIX_PROPERTY_SEED=random)."""
    test = SETTINGS(test)
    return test if SEED == "random" else seed(int(SEED))(test)


def by_code(rules: Sequence[type[Rule]]) -> pytest.MarkDecorator:
    return pytest.mark.parametrize("rule", rules, ids=[rule.code for rule in rules])


@functools.lru_cache(maxsize=4096)
def fixed(source: str, rule: type[Rule]) -> LintResult:
    """The rule alone (GF205 too, though off by default), unsafe fixes included."""
    return lint_source(source, rules=[rule], fix=True, unsafe_fixes=True)


def own(findings: Sequence[Finding], rule: type[Rule]) -> list[Finding]:
    return [f for f in findings if f.code == rule.code]


def fixable(findings: Sequence[Finding], rule: type[Rule]) -> list[Finding]:
    return [f for f in own(findings, rule) if f.fix is not None]


# -- 1. found ------------------------------------------------------------------------------
@by_code(RULES)
@reproducible
@given(data=st.data())
def test_variant_is_found(rule: type[Rule], data: st.DataObject) -> None:
    variant = data.draw(variants(rule), label="variant")
    found = own(fixed(variant.source, rule).findings, rule)
    expected = own(fixed(variant.seed.source, rule).findings, rule)
    if variant.reshaped:
        return  # `if True: b.backward()` then `b.backward()` is rightly not "twice" for sure
    assert found, "the variant is not reported"
    assert len(found) == len(expected), f"{len(found)} findings, the seed has {len(expected)}"
    assert len(fixable(found, rule)) == len(fixable(expected, rule))


# -- 2. fixed ------------------------------------------------------------------------------
@by_code(RULES)
@reproducible
@given(data=st.data())
def test_variant_is_fixed(rule: type[Rule], data: st.DataObject) -> None:
    variant = data.draw(variants(rule), label="variant")
    result = fixed(variant.source, rule)
    assert not result.dropped, result.dropped
    ast.parse(result.source)
    if fixable(result.findings, rule):
        assert result.source != variant.source, "a fixable finding, but nothing changed"
    left = fixable(fixed(result.source, rule).findings, rule)
    assert not left, f"fixable findings left after fixing: {left}"


# -- 3. idempotent -------------------------------------------------------------------------
@by_code(RULES)
@reproducible
@given(data=st.data())
def test_fix_is_idempotent(rule: type[Rule], data: st.DataObject) -> None:
    variant = data.draw(variants(rule), label="variant")
    once = fixed(variant.source, rule).source
    assert fixed(once, rule).source == once


# -- 4. keeps comments and formatting ------------------------------------------------------
@by_code(RULES)
@reproducible
@given(data=st.data())
def test_fix_keeps_comments_and_formatting(rule: type[Rule], data: st.DataObject) -> None:
    variant = data.draw(variants(rule), label="variant")
    result = fixed(variant.source, rule)
    lost = Counter(comments(variant.source)) - Counter(comments(result.source))
    assert not lost, f"comments lost by the fix: {sorted(lost)}"
    before = variant.source
    for _ in range(20):
        spans = fix_spans(before, rule)
        after = lint_source(before, rules=[rule], fix=True, unsafe_fixes=True, max_passes=1).source
        if after == before:
            break
        assert_confined(before, after, spans)
        before = after
    assert before == result.source, "fixing pass by pass differs from fixing at once"


def fix_spans(source: str, rule: type[Rule]) -> list[tuple[int, int]]:
    """The line ranges (1-based, inclusive) of the nodes the rule's fixes replace, with
    everything those nodes own (their leading comment lines, a block's header comment)."""
    linted = collect_reports(source, [rule], "<variant>")
    if linted.module is None:  # no fix planned: nothing replaced
        return []
    wrapper = MetadataWrapper(linted.module, unsafe_skip_copy=True)
    positions = wrapper.resolve(WhitespaceInclusivePositionProvider)
    spans = []
    for report in linted.reports:
        assert not isinstance(report.fix, FixPlan)  # collect_reports builds the plans
        for edit in report.fix.edits if report.fix else ():
            where = positions[edit.target]
            spans.append((where.start.line, where.end.line))
    return spans


_ADDED_IMPORT = re.compile(r"import [\w.]+\n")


def assert_confined(before: str, after: str, spans: Sequence[tuple[int, int]]) -> None:
    """Every run of lines of ``before`` outside ``spans`` is in ``after``, byte for byte
    and in order; what else ``after`` has is the fixed nodes and ``import`` lines added."""
    inside = {line for start, end in spans for line in range(start, end + 1)}
    lines = before.splitlines(keepends=True)
    runs: list[list[str]] = [[]]
    for number, line in enumerate(lines, start=1):
        if number in inside:
            runs.append([])
        else:
            runs[-1].append(line)
    new_lines = after.splitlines(keepends=True)
    added = Counter(new_lines) - Counter(lines)
    for line, count in added.items():
        if _ADDED_IMPORT.fullmatch(line):
            for _ in range(count):
                new_lines.remove(line)
    position = 0
    for run in filter(None, runs):
        found = _find_run(new_lines, run, position)
        assert found is not None, (
            "a fix changed lines outside the nodes it replaces:\n"
            + "".join(run)
            + f"\nreplaced lines: {sorted(spans)}\n--- before\n{before}--- after\n{after}"
        )
        position = found + len(run)


def _find_run(lines: Sequence[str], run: Sequence[str], start: int) -> int | None:
    for index in range(start, len(lines) - len(run) + 1):
        if list(lines[index : index + len(run)]) == list(run):
            return index
    return None


# -- 5. commutes with renaming and aliasing ------------------------------------------------
@by_code(RULES)
@reproducible
@given(data=st.data())
def test_fix_commutes_with_renaming(rule: type[Rule], data: st.DataObject) -> None:
    variant = data.draw(variants(rule, steps=("alias", "nest", "format", "comment")))
    fix_of_variant = fixed(variant.source, rule).source
    taken = identifiers(variant.source) | identifiers(fix_of_variant)
    mapping = data.draw(renamings(variant.source, taken), label="renaming")
    assume(mapping)  # a seed always has a name to rename
    renamed = rename(variant.source, mapping)
    lhs = fixed(renamed, rule).source
    rhs = rename(fix_of_variant, mapping)
    made_up = (identifiers(lhs) | identifiers(rhs)) - identifiers(renamed)
    assert same_up_to(lhs, rhs, made_up), "fix(rename(v)) != rename(fix(v))"


@by_code(RULES)
@reproducible
@given(data=st.data())
def test_fix_commutes_with_aliasing(rule: type[Rule], data: st.DataObject) -> None:
    variant = data.draw(variants(rule, steps=("rename", "nest", "format", "comment")))
    fix_of_variant = fixed(variant.source, rule).source
    taken = identifiers(variant.source) | identifiers(fix_of_variant)
    ops = data.draw(alias_plans(variant.source, taken), label="aliases")
    assume(ops)  # every seed imports torch
    lhs = fixed(apply_aliases(variant.source, ops), rule).source
    rhs = apply_aliases(fix_of_variant, ops)
    assert lhs == rhs, "fix(alias(v)) != alias(fix(v))"


def same_up_to(left: str, right: str, made_up: set[str]) -> bool:
    """``left == right`` once the names in ``made_up`` (names a fix invented, such as
    ``x_grad`` from ``x``) are matched one to one by position. The layout may differ (a
    fix may break a line that a longer name made too long): then the code (its AST) and
    the comments must be the same."""
    if left == right:
        return True
    try:
        left_names = _name_sequence(left)
        right_names = _name_sequence(right)
    except cst.ParserSyntaxError:
        return False
    if len(left_names) != len(right_names):
        return False
    mapping: dict[str, str] = {}
    for a, b in zip(left_names, right_names):
        if a == b and a not in mapping:
            continue
        if a not in made_up or b not in made_up or mapping.setdefault(a, b) != b:
            return False
    if len(set(mapping.values())) != len(mapping):
        return False
    renamed = rename(left, mapping)
    if renamed == right:
        return True
    same_code = ast.dump(ast.parse(renamed)) == ast.dump(ast.parse(right))
    return same_code and comments(renamed) == comments(right)


def _name_sequence(source: str) -> list[str]:
    names: list[str] = []

    class _Names(cst.CSTVisitor):
        def visit_Name(self, node: cst.Name) -> None:
            names.append(node.value)

    cst.parse_module(source).visit(_Names())
    return names


# -- the generators themselves -------------------------------------------------------------
def test_every_rule_has_seeds() -> None:
    from variants import seeds_for

    for rule in RULES:
        seeds = seeds_for(rule)
        assert len(seeds) >= len(rule.INVALID) + 1, rule.code
        assert all(isinstance(s, Seed) for s in seeds)


def test_variant_repr_names_the_seed() -> None:
    from variants import seeds_for

    seed_ = seeds_for(RULES[0])[0]
    assert repr(Variant(seed_, "x = 1\n", ("format",))).startswith(f"Variant of {seed_.name}")
