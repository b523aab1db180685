"""The ``rules`` and ``explain`` commands: what each rule finds and fixes."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated

import typer

from gradfix.cli.common import EXIT_ERROR, echo_stderr
from gradfix.cli.options import RulesFormat

if TYPE_CHECKING:
    from gradfix.rule import Rule


def rules(
    output_format: Annotated[
        RulesFormat, typer.Option("--format", help="text: a table; json: an array.")
    ] = RulesFormat.text,
) -> None:
    """List the rules: code, name, fix (what it offers: safe, unsafe, safe/unsafe by
    finding, `sometimes ...` when some findings are only reported, or none), default state
    and summary."""
    from gradfix.registry import all_rules

    known = all_rules()
    if output_format is RulesFormat.json:
        typer.echo(json.dumps([rule_to_dict(rule) for rule in known], indent=2))
        return
    rows = [("CODE", "NAME", "FIX", "DEFAULT", "SUMMARY")]
    rows += [
        (rule.code, rule.name, rule.fix_label(), _default_state(rule), rule.summary())
        for rule in known
    ]
    widths = [max(len(row[column]) for row in rows) for column in range(4)]
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row, widths)]
        typer.echo("  ".join([*cells, row[4]]).rstrip())


def rule_to_dict(rule: type[Rule]) -> dict[str, object]:
    """``safety`` (kept from before ``fix``) is ``unsafe`` when any fix may be unsafe and
    None when the rule never fixes."""
    riskiest = rule.riskiest_safety()
    return {
        "code": rule.code,
        "name": rule.name,
        "message": rule.message,
        "safety": None if riskiest is None else riskiest.value,
        "default_enabled": rule.default_enabled,
        "summary": rule.summary(),
        "fix": rule.fix_label(),
        "fix_availability": rule.fix_availability.value,
        "fix_safeties": [safety.value for safety in rule.offered_safeties()],
    }


def explain(
    code: Annotated[str, typer.Argument(metavar="CODE", help="A rule code or kebab name.")],
) -> None:
    """Show a rule's documentation (`gradfix explain GF101`)."""
    from gradfix.registry import SelectionError, find_rule

    try:
        rule = find_rule(code)
    except SelectionError as error:
        echo_stderr(f"error: {error}")
        raise typer.Exit(EXIT_ERROR) from None
    typer.echo(f"# {rule.code} {rule.name}\n")
    typer.echo(
        f"Fix: {rule.fix_label()}. {rule.fix_sentence()} "
        f"{_default_state(rule).capitalize()} by default.\n"
    )
    typer.echo(rule.docs())


def _default_state(rule: type[Rule]) -> str:
    return "enabled" if rule.default_enabled else "disabled"
