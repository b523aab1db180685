"""Rule selection (gradfix.registry): --select / --ignore resolution and lookup."""

from __future__ import annotations

import re

import pytest

from gradfix.registry import SelectionError, all_rules, find_rule, select_rules
from gradfix.rule import FixSafety, Rule


def make_rule(code: str, name: str, default_enabled: bool = True) -> type[Rule]:
    attributes = {
        "code": code,
        "name": name,
        "message": f"{name} message",
        "fix_safety": FixSafety.SAFE,
        "default_enabled": default_enabled,
    }
    return type(name.title().replace("-", ""), (Rule,), attributes)


A101 = make_rule("GF101", "tensor-thing")
A102 = make_rule("GF102", "other-thing", default_enabled=False)
B201 = make_rule("GF201", "leaf-thing")
B202 = make_rule("GF202", "index-thing")
RULES = [A101, A102, B201, B202]


def codes(select: list[str] | None = None, ignore: list[str] | None = None) -> list[str]:
    return [rule.code for rule in select_rules(select, ignore, rules=RULES)]


def test_default_selection_is_the_default_enabled_rules() -> None:
    assert codes() == ["GF101", "GF201", "GF202"]


def test_ignore_removes_from_the_default_selection() -> None:
    assert codes(ignore=["GF2"]) == ["GF101"]


@pytest.mark.parametrize(
    ("select", "expected"),
    [
        (["GF1"], ["GF101", "GF102"]),  # a prefix enables the rules off by default too
        (["GF102"], ["GF102"]),
        (["ALL"], ["GF101", "GF102", "GF201", "GF202"]),
        (["gf2"], ["GF201", "GF202"]),  # any case
        (["GF101, GF202"], ["GF101", "GF202"]),  # comma-separated, spaces allowed
        (["GF101", "GF202"], ["GF101", "GF202"]),  # repeated
        (["GF101,"], ["GF101"]),
        (["leaf-thing"], ["GF201"]),  # a kebab name
    ],
)
def test_select(select: list[str], expected: list[str]) -> None:
    assert codes(select=select) == expected


@pytest.mark.parametrize(
    ("select", "ignore", "expected"),
    [
        (["GF2"], ["GF202"], ["GF201"]),
        (["GF201"], ["GF2"], ["GF201"]),  # the more specific selector wins
        (["GF2"], ["GF2"], []),  # on a tie, ignore wins
        (["ALL"], ["GF1"], ["GF201", "GF202"]),
        (["GF1"], ["ALL"], ["GF101", "GF102"]),
        (["GF201"], ["leaf-thing"], []),
    ],
)
def test_select_and_ignore(select: list[str], ignore: list[str], expected: list[str]) -> None:
    assert codes(select=select, ignore=ignore) == expected


@pytest.mark.parametrize(
    ("select", "ignore", "message"),
    [
        (["GF9"], None, "unknown rule code or prefix 'GF9' in --select"),
        (["GF101,XYZ"], None, "unknown rule code or prefix 'XYZ' in --select"),
        (None, ["GF1011"], "unknown rule code or prefix 'GF1011' in --ignore"),
    ],
)
def test_unknown_selector_is_an_error(
    select: list[str] | None, ignore: list[str] | None, message: str
) -> None:
    with pytest.raises(SelectionError) as error:
        select_rules(select, ignore, rules=RULES)
    assert str(error.value).startswith(message)
    assert "\n" not in str(error.value)


def test_find_rule_by_code_or_name() -> None:
    assert find_rule("GF201", RULES) is B201
    assert find_rule("gf201", RULES) is B201
    assert find_rule("index-thing", RULES) is B202
    with pytest.raises(SelectionError, match="unknown rule 'GF999'"):
        find_rule("GF999", RULES)


def test_each_rule_file_registers_its_rule_by_being_there() -> None:
    """Every module of ``codemods/`` holds one rule and ``ALL_RULES`` has it, with no line
    to add anywhere else."""
    import pkgutil

    import gradfix.codemods as package

    modules = {f"{package.__name__}.{m.name}" for m in pkgutil.iter_modules(package.__path__)}
    assert sorted(rule.__module__ for rule in package.ALL_RULES) == sorted(modules)


def test_the_real_rules() -> None:
    known = all_rules()
    assert [rule.code for rule in known] == sorted(rule.code for rule in known)
    assert len({rule.code for rule in known}) == len(known)
    assert all(re.fullmatch(r"GF\d{3}", rule.code) for rule in known)
    assert all(re.fullmatch(r"[a-z]+(-[a-z]+)*", rule.name) for rule in known)
    assert find_rule("GF101").name == "tensor-from-tensors"
    assert find_rule("tensor-from-tensors").code == "GF101"
    assert "GF101" in [rule.code for rule in select_rules()]


@pytest.mark.parametrize("rule", all_rules(), ids=lambda rule: rule.code)
def test_every_summary_is_one_sentence_that_fits_a_table_cell(rule: type[Rule]) -> None:
    """`gradfix rules` shows it in a table cell (GF204's was 2,000 characters): the rule
    declares one sentence of at most 160 characters; `explain` has the details."""
    summary = rule.summary()
    assert "synopsis" in vars(rule), f"{rule.code} declares no synopsis"
    assert len(summary) <= 160, (rule.code, len(summary))
    assert summary.endswith(".") and "\n" not in summary
    prose = re.sub(r"`[^`]*`", "code", summary)  # dots inside code spans are not stops
    assert not re.search(r"[.!?]\s", prose), f"{rule.code}: more than one sentence: {summary}"
