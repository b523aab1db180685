"""``gradfix trace``'s output: the runtime findings in ``check``'s formats.

A runtime finding becomes a :class:`gradfix.rule.Finding` at its user line (column 1 to the
end of the line), so text, concise, SARIF and GitHub output come from the same formatters
as ``check``; JSON adds what makes it a finding *from a run*: ``"source": "run"``, the kind,
the step (1 = the first backward call) and the evidence (the error message, the lines of
the ops involved, shapes).
"""

from __future__ import annotations

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
    """Evidence with its ``{"path", "line"}`` sites relative to the current directory."""
    if isinstance(value, dict) and set(value) == {"path", "line"}:
        return {"path": display_path(str(value["path"])), "line": value["line"]}
    return value


def _line_length(path: str, line: int) -> int:
    try:
        with open(path, encoding="utf-8", errors="replace") as source:
            for number, text in enumerate(source, start=1):
                if number == line:
                    return len(text.rstrip("\r\n"))
    except OSError:
        pass
    return 0
