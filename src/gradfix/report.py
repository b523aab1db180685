"""Migration reports: ``gradfix fix --report FILE`` (``.json``, ``.md`` or ``.html``).

A report lists every finding of a batch run with its file, rule and, when a fix applies,
the file's diff; with ``--verify``, each fix's verdict and evidence; and the totals by rule
and by verdict. The format follows the file's suffix.

    write_report("migration.md", run, verdicts)
"""

from __future__ import annotations

import html
import json
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from gradfix.fileio.diff import file_diff

if TYPE_CHECKING:
    from gradfix.proof import FixVerdict
    from gradfix.runner import RunResult

SUFFIXES = (".json", ".md", ".html")


class ReportError(ValueError):
    """A report that cannot be written; ``str()`` is a one-line message."""


def build_report(
    run: RunResult, verdicts: Mapping[str, Sequence[FixVerdict]] | None = None
) -> dict[str, Any]:
    """The report as plain data (what the JSON report is)."""
    verdicts = verdicts or {}
    files = []
    by_rule: Counter[str] = Counter()
    by_verdict: Counter[str] = Counter()
    for result in sorted(run.files, key=lambda r: r.path):
        judged = {
            (v.finding.line, v.finding.col, v.finding.code): v
            for v in verdicts.get(result.path, [])
        }
        findings = []
        for finding in result.findings:
            record = finding.to_dict(result.path)
            verdict = judged.get((finding.line, finding.col, finding.code))
            if verdict is not None:
                record.update(
                    verdict=verdict.status, reason=verdict.reason, evidence=verdict.evidence
                )
                by_verdict[verdict.status] += 1
            by_rule[finding.code] += 1
            findings.append(record)
        diff = ""
        if result.changed and result.original is not None and result.fixed is not None:
            raw = file_diff(result.original, result.fixed, result.path, result.encoding)
            diff = raw.decode(result.encoding, "replace")
        if findings or diff or result.error or result.skipped_cells:
            files.append(
                {
                    "path": result.path,
                    "findings": findings,
                    "diff": diff,
                    "fixed": result.fixed_count,
                    "written": result.written,
                    "error": result.error,
                    "skipped_cells": result.skipped_cells,
                }
            )
    return {
        "files": files,
        "totals": {
            "files": len(run.files),
            "files_with_findings": sum(1 for f in files if f["findings"]),
            "findings": sum(by_rule.values()),
            "fixed": sum(f["fixed"] for f in files),
            "errors": sum(1 for f in files if f["error"]),
            "by_rule": dict(sorted(by_rule.items())),
            "by_verdict": dict(sorted(by_verdict.items())),
        },
    }


def write_report(
    path: str, run: RunResult, verdicts: Mapping[str, Sequence[FixVerdict]] | None = None
) -> None:
    suffix = os.path.splitext(path)[1].lower()
    if suffix not in SUFFIXES:
        raise ReportError(f"--report {path}: the suffix must be one of {', '.join(SUFFIXES)}")
    data = build_report(run, verdicts)
    if suffix == ".html":
        text = _html(data, _pictures(run))
    else:
        text = {".json": _json, ".md": _markdown}[suffix](data)
    try:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
    except OSError as error:
        raise ReportError(f"--report {path}: {error.strerror}") from None


def _json(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=2) + "\n"


def _markdown(data: dict[str, Any]) -> str:
    totals = data["totals"]
    lines = [
        "# gradfix migration report",
        "",
        f"{totals['files']} files, {totals['files_with_findings']} with findings; "
        f"{totals['findings']} findings, {totals['fixed']} fixed, {totals['errors']} errors.",
        "",
        "| Rule | Findings |",
        "|------|---------:|",
        *(f"| {code} | {n} |" for code, n in totals["by_rule"].items()),
    ]
    if totals["by_verdict"]:
        lines += ["", "| Verdict | Fixes |", "|---------|------:|"]
        lines += [f"| {status} | {n} |" for status, n in totals["by_verdict"].items()]
    for entry in data["files"]:
        lines += ["", f"## {entry['path']}", ""]
        if entry["error"]:
            lines.append(f"- error: {entry['error']}")
        lines += [f"- {cell}" for cell in entry["skipped_cells"]]
        for f in entry["findings"]:
            verdict = f" — **{f['verdict']}**: {f['reason']}" if "verdict" in f else ""
            lines.append(f"- {f['line']}:{f['col']} `{f['code']}` {f['message']}{verdict}")
        if entry["diff"]:
            lines += ["", "```diff", entry["diff"].rstrip("\n"), "```"]
    return "\n".join(lines) + "\n"


def _pictures(run: RunResult) -> dict[tuple[str, int, int, str], str]:
    """Each finding's drawing (:mod:`gradfix.picture`): its path before, and after its fix
    when it has one. Notebooks get none (their lines count from each cell)."""
    from gradfix.engine import single_fixes
    from gradfix.picture import figure, fixed_path, mark_label, static_path
    from gradfix.registry import all_rules

    pictures = {}
    for result in run.files:
        source = result.original
        if not result.findings or source is None or result.path.endswith(".ipynb"):
            continue
        singles = result.singles
        if singles is None and any(f.fix is not None for f in result.findings):
            singles = single_fixes(source, rules=all_rules(), path=result.path)
        for finding in result.findings:
            key = (finding.line, finding.col, finding.code)
            single = next(
                (
                    s
                    for s in singles or []
                    if s.source is not None and key in {(f.line, f.col, f.code) for f in s.findings}
                ),
                None,
            )
            try:
                after = fixed_path(source, single.source, finding.line) if single else []
                before = static_path(source, finding.line)
            except RecursionError:  # a file nested too deep to analyse: no drawing
                continue
            pictures[(result.path, *key)] = figure(before, after, mark_label(finding.code))
    return pictures


def _html(
    data: dict[str, Any], pictures: Mapping[tuple[str, int, int, str], str] | None = None
) -> str:
    from gradfix.picture import STYLE

    pictures = pictures or {}
    e = html.escape
    totals = data["totals"]
    rows = "".join(f"<tr><td>{e(c)}</td><td>{n}</td></tr>" for c, n in totals["by_rule"].items())
    verdicts = "".join(
        f"<tr><td>{e(s)}</td><td>{n}</td></tr>" for s, n in totals["by_verdict"].items()
    )
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>gradfix report</title>",
        "<style>body{font-family:sans-serif}pre{background:#f6f8fa;padding:8px}"
        "td,th{padding:2px 8px}" + STYLE + "</style></head><body><h1>gradfix migration report</h1>",
        f"<p>{totals['files']} files, {totals['files_with_findings']} with findings; "
        f"{totals['findings']} findings, {totals['fixed']} fixed, {totals['errors']} errors.</p>",
        f"<table><tr><th>Rule</th><th>Findings</th></tr>{rows}</table>",
    ]
    if verdicts:
        parts.append(f"<table><tr><th>Verdict</th><th>Fixes</th></tr>{verdicts}</table>")
    for entry in data["files"]:
        parts.append(f"<h2>{e(entry['path'])}</h2><ul>")
        if entry["error"]:
            parts.append(f"<li>error: {e(entry['error'])}</li>")
        parts += [f"<li>{e(cell)}</li>" for cell in entry["skipped_cells"]]
        for f in entry["findings"]:
            verdict = f" — <b>{e(f['verdict'])}</b>: {e(f['reason'])}" if "verdict" in f else ""
            parts.append(
                f"<li>{f['line']}:{f['col']} <code>{e(f['code'])}</code> "
                f"{e(f['message'])}{verdict}"
                f"{pictures.get((entry['path'], f['line'], f['col'], f['code']), '')}</li>"
            )
        parts.append("</ul>")
        if entry["diff"]:
            parts.append(f"<pre>{e(entry['diff'])}</pre>")
    parts.append("</body></html>\n")
    return "\n".join(parts)
