"""Golden fixtures: fixtures/<codemod>/<case>.{before,after,clean,report}.py.

- fixing ``before`` with the codemod's rule (unsafe fixes on) gives ``after`` byte for byte;
- fixing ``after`` changes nothing (idempotence);
- ``clean`` gets no finding from any default rule nor from its own;
- ``report`` is a report-only case: the codemod's rule reports exactly the lines marked
  with a trailing ``# error: GFxxx`` comment (the line a finding starts on, the rule's
  own code), and offers no fix for any of them (fixing changes nothing);
- ``before`` and ``after`` are executed and the verifier proves the rewrite
  (same forward results, finite and correct gradients), as a fix of the fixture's rule.

``pytest --update-fixtures`` rewrites the ``after`` files from the fixer, on purpose only.
"""

from __future__ import annotations

import os
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from gradfix.codemods import ALL_RULES
from gradfix.engine import lint_source
from gradfix.rule import FixAvailability, Rule

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
RULES_BY_MODULE = {rule.__module__.rsplit(".", 1)[-1]: rule for rule in ALL_RULES}
#: ``# error: GF201``: a ``report`` fixture's line where a finding of GF201 starts
ERROR_MARK = re.compile(r"#\s*error:\s*(GF\d{3})\b")


def _cases(kind: str) -> list[Path]:
    return sorted(FIXTURES.glob(f"*/*.{kind}.py"))


def _rule_for(path: Path) -> type[Rule]:
    return RULES_BY_MODULE[path.parent.name]


def _read(path: Path) -> str:
    return path.read_bytes().decode("utf-8")


def _fix(source: str, rule: type[Rule], path: Path) -> str:
    return lint_source(source, rules=[rule], path=str(path), fix=True, unsafe_fixes=True).source


def _case_id(path: Path) -> str:
    return f"{path.parent.name}/{path.name.split('.')[0]}"


def test_every_fixture_directory_belongs_to_a_codemod() -> None:
    directories = {p.name for p in FIXTURES.iterdir() if p.is_dir()}
    assert directories <= set(RULES_BY_MODULE), directories - set(RULES_BY_MODULE)
    assert set(RULES_BY_MODULE) <= directories, set(RULES_BY_MODULE) - directories


@pytest.mark.parametrize("before", _cases("before"), ids=_case_id)
def test_fix_gives_after(before: Path, update_fixtures: bool) -> None:
    rule = _rule_for(before)
    after_path = before.with_name(before.name.replace(".before.py", ".after.py"))
    source = _read(before)
    result = lint_source(source, rules=[rule], path=str(before), fix=True, unsafe_fixes=True)
    assert rule.code in {f.code for f in result.findings}, "the pitfall is not reported"
    if update_fixtures:
        after_path.write_bytes(result.source.encode("utf-8"))
    assert result.source == _read(after_path)
    assert not result.dropped


@pytest.mark.parametrize("after", _cases("after"), ids=_case_id)
def test_fix_is_idempotent(after: Path) -> None:
    source = _read(after)
    assert _fix(source, _rule_for(after), after) == source


@pytest.mark.parametrize("clean", _cases("clean"), ids=_case_id)
def test_clean_has_no_finding(clean: Path) -> None:
    # every rule on by default, and the fixture's own rule (GF205 is off by default: its
    # modernisation of `.data` is not a finding on code that opted out of it)
    rules = [r for r in ALL_RULES if r.default_enabled or r is _rule_for(clean)]
    result = lint_source(_read(clean), rules=rules, path=str(clean))
    assert result.findings == []


def _marked_findings(source: str) -> list[tuple[int, str]]:
    """(line, code) of every ``# error: CODE`` comment."""
    return [
        (number, mark.group(1))
        for number, line in enumerate(source.splitlines(), start=1)
        for mark in ERROR_MARK.finditer(line)
    ]


@pytest.mark.parametrize("report", _cases("report"), ids=_case_id)
def test_report_case_is_reported_without_a_fix(report: Path) -> None:
    rule = _rule_for(report)
    assert rule.fix_availability is not FixAvailability.ALWAYS, f"{rule.code} always fixes"
    source = _read(report)
    marked = _marked_findings(source)
    assert marked, "mark each finding's line with `# error: CODE`"
    assert {code for _, code in marked} == {rule.code}, "the marks name the fixture's rule"
    findings = lint_source(source, rules=[rule], path=str(report)).findings
    assert sorted((f.line, f.code) for f in findings) == marked
    assert [f for f in findings if f.fix is not None] == [], "a report-only case offers a fix"
    assert _fix(source, rule, report) == source


@pytest.fixture(scope="session")
def verdicts() -> dict[Path, object]:
    """Verify every before/after pair once, two at a time (each pair runs subprocesses)."""
    pytest.importorskip("torch")
    from gradfix.verify import verify_files

    pairs = _cases("before")

    def verify(before: Path) -> object:
        after = before.with_name(before.name.replace(".before.py", ".after.py"))
        # the fix's rule decides whether torch's weights left without gradient are checked
        return verify_files(before, after, timeout=120, rules=(_rule_for(before).code,))

    workers = max(1, min(4, os.cpu_count() or 1))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return dict(zip(pairs, pool.map(verify, pairs)))


@pytest.mark.parametrize("before", _cases("before"), ids=_case_id)
def test_fix_is_verified_by_execution(before: Path, verdicts: dict[Path, object]) -> None:
    verdict = verdicts[before]
    assert verdict.status == "verified", f"{verdict.status}: {verdict.reason}"  # type: ignore[attr-defined]
