"""``gradfix trace``'s output: the runtime findings in ``check``'s formats.

A runtime finding becomes a :class:`gradfix.rule.Finding` at its user line (column 1 to the
end of the line), so text, concise, SARIF and GitHub output come from the same formatters
as ``check``; JSON adds what makes it a finding *from a run*: ``"source": "run"``, the kind,
the step (1 = the first backward call) and the evidence (the error message, the lines of
the ops involved, shapes).
"""

from __future__ import annotations

import html
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from gradfix.rule import Finding, Rule
from gradfix.trace.launch import RuntimeFinding, TraceResult

if TYPE_CHECKING:
    from gradfix.trace.link import TraceFix


def display_path(path: str, root: str | None = None) -> str:
    """``path`` relative to ``root`` (the current directory) when it is inside it."""
    root = os.path.abspath(root or os.getcwd())
    try:
        relative = os.path.relpath(path, root)
    except ValueError:  # another drive (Windows)
        return path
    return path if relative.startswith(os.pardir) else relative


def as_finding(finding: RuntimeFinding, rules: Sequence[type[Rule]]) -> Finding:
    names = {rule.code: rule.name for rule in rules}
    return Finding(
        line=finding.line,
        col=1,
        code=finding.code,
        name=names.get(finding.code, ""),
        message=f"{finding.message} [from a run, step {finding.step}]",
        end_line=finding.line,
        end_col=_line_length(finding.path, finding.line) + 1,
    )


def trace_finding(
    finding: RuntimeFinding, fix: TraceFix | None, rules: Sequence[type[Rule]]
) -> Finding:
    """The finding to print: the static rule's finding and fix where one covers the line."""
    return fix.finding() if fix is not None else as_finding(finding, rules)


def finding_dict(
    finding: RuntimeFinding, fix: TraceFix | None, rules: Sequence[type[Rule]]
) -> dict[str, Any]:
    data = trace_finding(finding, fix, rules).to_dict(display_path(finding.path))
    data["message"] = finding.message
    data.update(source="run", kind=finding.kind, step=finding.step)
    data["evidence"] = {key: _relative(value) for key, value in finding.evidence.items()}
    if fix is not None and fix.verdict is not None:
        status, reason, _ = fix.verdict
        data["verdict"] = {"status": status, "reason": reason}
    return data


def run_summary(result: TraceResult, command: str) -> str:
    """``the program exited with status 1 after 3 backward calls: RuntimeError: ...``"""
    calls = f"{result.steps} backward call{'' if result.steps == 1 else 's'}"
    if result.status == "timeout":
        ending = "was stopped at the timeout"
    elif result.status == "max-steps":
        ending = "was stopped by --max-steps"
    else:
        ending = f"exited with status {result.exit_code}"
    error = f": {result.error}" if result.error and result.status == "error" else ""
    return f"trace: `{command}` {ending} after {calls}{error}"


def notes_summary(result: TraceResult) -> str | None:
    """One line when the tracer itself failed somewhere (the program ran on regardless)."""
    if not result.notes:
        return None
    count = len(result.notes)
    return (
        f"trace: the tracer hit {count} internal error{'' if count == 1 else 's'} and may "
        f"have missed findings (first: {result.notes[0]})"
    )


def _relative(value: Any) -> Any:
    """Evidence with its ``{"path", "line"}`` sites (also those of a ``graph`` list's
    ``{"op", "path", "line"}``) relative to the current directory."""
    if isinstance(value, list):
        return [_relative(item) for item in value]
    if isinstance(value, dict) and {"path", "line"} <= set(value) <= {"op", "path", "line"}:
        path = value["path"]
        return {**value, "path": display_path(str(path)) if path is not None else None}
    return value


def trace_html(
    result: TraceResult, fixes: Sequence[TraceFix], rules: Sequence[type[Rule]], command: str
) -> str:
    """``gradfix trace --report run.html``: each finding of the run with its drawing
    (:mod:`gradfix.picture`): the path the run took to it, and the fixed code's path."""
    from gradfix.picture import STYLE, figure, fixed_path, mark_label, runtime_path

    e = html.escape
    linked = {id(fix.runtime): fix for fix in fixes if not fix.parts}
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>gradfix trace</title>",
        "<style>body{font-family:sans-serif}code{background:#f6f8fa}" + STYLE + "</style>",
        "</head><body><h1>gradfix trace report</h1>",
        f"<p>{e(run_summary(result, command))}</p><ul>",
    ]
    for runtime in result.findings:
        fix = linked.get(id(runtime))
        finding = trace_finding(runtime, fix, rules)
        source = _read(runtime.path)
        before = runtime_path(runtime.path, runtime.line, runtime.evidence, source)
        after = []
        if fix is not None and fix.single.source is not None:
            after = fixed_path(fix.original.text, fix.fixed_source, fix.static.line)
        fixing = f" — fix: {e(finding.fix.description)}" if finding.fix is not None else ""
        parts.append(
            f"<li>{e(finding.location(display_path(runtime.path)))} "
            f"<code>{e(finding.code)}</code> {e(runtime.message)} (step {runtime.step})"
            f"{fixing}{figure(before, after, mark_label(runtime.code, runtime.kind))}</li>"
        )
    if not result.findings:
        parts.append("<li>No findings.</li>")
    parts.append("</ul></body></html>\n")
    return "\n".join(parts)


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return ""


def _line_length(path: str, line: int) -> int:
    try:
        with open(path, encoding="utf-8", errors="replace") as source:
            for number, text in enumerate(source, start=1):
                if number == line:
                    return len(text.rstrip("\r\n"))
    except OSError:
        pass
    return 0
