"""Every rule's embedded VALID / INVALID examples (Fixit style), collected automatically."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from gradfix.codemods import ALL_RULES
from gradfix.engine import lint_source
from gradfix.rule import FixAvailability, Invalid, Rule


def _dedent(code: str) -> str:
    return textwrap.dedent(code).lstrip("\n")


VALID_CASES = [
    pytest.param(rule, example, id=f"{rule.code}-valid-{index}")
    for rule in ALL_RULES
    for index, example in enumerate(rule.VALID)
]
INVALID_CASES = [
    pytest.param(rule, example, id=f"{rule.code}-invalid-{index}")
    for rule in ALL_RULES
    for index, example in enumerate(rule.INVALID)
]


@pytest.mark.parametrize(("rule", "example"), VALID_CASES)
def test_valid_example_has_no_finding(rule: type[Rule], example) -> None:
    # the default rules and the example's own (off-by-default GF205 reports `.data` that
    # other rules' VALID examples may use on purpose)
    rules = [r for r in ALL_RULES if r.default_enabled or r is rule]
    result = lint_source(_dedent(example.code), rules=rules)
    assert result.findings == [], f"{rule.code} VALID example reported: {result.findings}"


@pytest.mark.parametrize(("rule", "example"), INVALID_CASES)
def test_invalid_example_is_reported_and_fixed(rule: type[Rule], example: Invalid) -> None:
    """Reported, then either fixed into ``expected_fix`` (idempotently) or, when
    ``report_only``, offered no fix by any of the rule's findings."""
    assert example.report_only or example.expected_fix is not None, (
        f"{rule.code}: an INVALID example says what it offers: expected_fix or report_only=True"
    )
    source = _dedent(example.code)
    if example.report_only:
        findings = [f for f in lint_source(source, rules=[rule]).findings if f.code == rule.code]
        assert findings, f"{rule.code} report-only example not reported"
        assert [f for f in findings if f.fix is not None] == [], "report-only but offers a fix"
        return
    result = lint_source(source, rules=[rule], fix=True, unsafe_fixes=True)
    assert rule.code in {f.code for f in result.findings}
    if example.expected_fix is not None:
        expected = _dedent(example.expected_fix)
        assert result.source == expected
        again = lint_source(expected, rules=[rule], fix=True, unsafe_fixes=True)
        assert again.source == expected, "fix is not idempotent"


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda r: r.code)
def test_rule_metadata_is_complete(rule: type[Rule]) -> None:
    assert rule.code.startswith("GF") and len(rule.code) == 5
    assert rule.name == rule.name.lower() and " " not in rule.name
    assert rule.message
    for section in ("What it does", "Why is this bad?", "Example", "Use instead", "Fix safety"):
        assert f"## {section}" in rule.docs(), f"{rule.code} docs lack '## {section}'"
    assert rule.summary()
    assert rule.VALID and rule.INVALID


def test_codes_and_names_are_unique() -> None:
    assert len({r.code for r in ALL_RULES}) == len(ALL_RULES)
    assert len({r.name for r in ALL_RULES}) == len(ALL_RULES)


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda r: r.code)
def test_fix_declaration_matches_invalid_examples(rule: type[Rule]) -> None:
    """A rule's declared fix availability and safeties are what its INVALID examples
    produce: "always" fixes every finding, "never" none, "sometimes" some; and the
    examples show every declared safety and no other. The examples declare it too: a
    "never" rule's are all report-only, an "always" rule's none."""
    report_only = [example.report_only for example in rule.INVALID]
    if rule.fix_availability is FixAvailability.NEVER:
        assert all(report_only), f"{rule.code} never fixes: every INVALID is report_only"
    if rule.fix_availability is FixAvailability.ALWAYS:
        assert not any(report_only), f"{rule.code} always fixes: no INVALID is report_only"
    findings = [
        finding
        for example in rule.INVALID
        for finding in lint_source(_dedent(example.code), rules=[rule]).findings
        if finding.code == rule.code
    ]
    fixed = [finding for finding in findings if finding.fix is not None]
    if len(fixed) == len(findings):
        seen = FixAvailability.ALWAYS
    else:
        seen = FixAvailability.SOMETIMES if fixed else FixAvailability.NEVER
    assert rule.fix_availability is seen
    safeties = {finding.fix.safety for finding in fixed if finding.fix is not None}
    assert safeties == {safety.value for safety in rule.offered_safeties()}
    if rule.fix_availability is not FixAvailability.NEVER:
        assert rule.fix_safety in rule.offered_safeties()  # what `Rule.fix` builds by default


def test_readme_rule_table_shows_what_each_rule_fixes() -> None:
    """The Fix column of README's rule table is `gradfix rules`' FIX column."""
    readme = (Path(__file__).parents[1] / "README.md").read_text(encoding="utf-8")
    rows = {
        cells[1]: cells[3]
        for line in readme.splitlines()
        if line.startswith("| GF")
        for cells in [[cell.strip() for cell in line.split("|")]]
    }
    assert rows == {rule.code: rule.fix_label() for rule in ALL_RULES}


def test_readme_example_of_what_gradfix_can_see() -> None:
    """README's "What gradfix can see": the helper alone has no finding; a call in the same
    file with a tensor that requires grad makes its line 1 a GF101 finding."""
    readme = (Path(__file__).parents[1] / "README.md").read_text(encoding="utf-8")
    section = readme.split("**What gradfix can see.**")[1]
    example = section.split("```python\n")[1].split("```")[0]
    helper = example.splitlines()[0] + "\n"
    assert lint_source("import torch\n" + helper, rules=ALL_RULES).findings == []
    findings = lint_source("import torch\n" + example, rules=ALL_RULES).findings
    assert [(f.line - 1, f.code) for f in findings] == [(1, "GF101")]
