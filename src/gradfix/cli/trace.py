"""The ``trace`` command: run a program under instrumentation, report the autograd bugs it hits."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated

import typer

from gradfix.cli.check import check_summary, print_findings
from gradfix.cli.common import (
    EXIT_CLEAN,
    EXIT_ERROR,
    EXIT_FINDINGS,
    PROGRESS_MIN_FIXES,
    cache_dir,
    check_entry,
    count_of,
    echo_stderr,
    progress_bar,
)
from gradfix.cli.options import (
    CheckFormat,
    NoCacheOption,
    TraceCommandArgument,
    TraceEntryOption,
    TraceMaxStepsOption,
    TraceReportOption,
    TraceTimeoutOption,
    TraceVerifyCommandOption,
)
from gradfix.shorten import shorten

if TYPE_CHECKING:
    from gradfix.rule import Finding, Rule
    from gradfix.trace import TraceResult
    from gradfix.trace.link import TraceFix


def trace(
    command: TraceCommandArgument = None,
    entry: TraceEntryOption = None,
    output_format: Annotated[
        CheckFormat,
        typer.Option(
            "--format",
            help="As for `check`; with json, sarif and github the program's stdout goes to "
            "stderr, so stdout holds only the report.",
        ),
    ] = CheckFormat.text,
    timeout: TraceTimeoutOption = None,
    max_steps: TraceMaxStepsOption = None,
    verify_fixes: Annotated[
        bool,
        typer.Option(
            "--verify",
            help="Prove each finding's fix by running the program again with it "
            "(forward results and gradients compared, as `gradfix verify`).",
        ),
    ] = False,
    write: Annotated[
        bool,
        typer.Option("--write", "-w", help="Apply the fixes proven by --verify (implies it)."),
    ] = False,
    verify_command: TraceVerifyCommandOption = None,
    no_cache: NoCacheOption = False,
    report: TraceReportOption = None,
) -> None:
    """Run a program once under instrumentation and report the autograd bugs it hits.

    Each finding is pinned to a line of your code (not torch's) and to the rule whose fix
    applies: in-place changes of saved tensors (with the op that saved them), in-place ops
    on leaves, backward through a freed graph, integer tensors asked for grad, cut graphs,
    the op whose backward first gave nan/inf, non-leaf `.grad` reads and graphs kept alive
    by running totals. The program's own output passes through; nothing of the project is
    written (the findings are remembered in .gradfix_cache for the editor, see the README).

    \b
    Exit status:
      0  the program ran and nothing was found
      1  findings
      2  the program could not be started, failed or timed out without a finding,
         or a bad option
    """
    from gradfix.trace import LaunchError, run_trace
    from gradfix.trace.launch import DEFAULT_TIMEOUT

    argv = _trace_command(command, entry)
    if report is not None and not report.lower().endswith(".html"):
        echo_stderr(f"error: --report {report}: the suffix must be .html")
        raise typer.Exit(EXIT_ERROR)
    if verify_command is not None and not (verify_fixes or write):
        echo_stderr("error: --cmd drives the verification: add --verify (or --write)")
        raise typer.Exit(EXIT_ERROR)
    machine = output_format in (CheckFormat.json, CheckFormat.sarif, CheckFormat.github)
    try:
        result = run_trace(
            argv,
            timeout=DEFAULT_TIMEOUT if timeout is None else timeout,
            max_steps=max_steps,
            stdout=sys.stderr if machine else None,
        )
    except LaunchError as error:
        echo_stderr(f"error: {error}")
        raise typer.Exit(EXIT_ERROR) from None
    if not no_cache:
        _remember(result, argv)
    from gradfix.trace.link import link_fixes, prove_fixes

    fixes = link_fixes(result.findings)
    if verify_fixes or write:
        driver = argv if verify_command is None else shlex.split(verify_command)
        with progress_bar("proving", PROGRESS_MIN_FIXES, noun="fix") as progress:
            fixes = prove_fixes(
                fixes,
                driver,
                timeout=timeout or 60.0,
                progress=progress,
                findings=result.findings,
            )
    _print_trace(result, fixes, output_format, " ".join(argv) if entry is None else entry)
    if report is not None:
        _write_trace_report(report, result, fixes, " ".join(argv) if entry is None else entry)
    if write:
        _write_trace_fixes(fixes)
    if result.findings:
        raise typer.Exit(EXIT_FINDINGS)
    raise typer.Exit(EXIT_CLEAN if result.status in ("ok", "max-steps") else EXIT_ERROR)


def _remember(result: TraceResult, argv: list[str]) -> None:
    """Keep the run's findings in the project's ``.gradfix_cache``: the language server
    shows them (marked as from a run) until their line changes."""
    import os

    from gradfix.config import ConfigError, load_config
    from gradfix.trace.remembered import remember

    try:
        directory = cache_dir(load_config(), False)
    except ConfigError:  # a broken configuration is check's business, not trace's
        return
    if directory is not None:
        remember(result.findings, argv, cache_dir=directory, cwd=os.getcwd())


def _trace_command(command: list[str] | None, entry: str | None) -> list[str]:
    from gradfix.trace import entry_command

    if entry is not None:
        check_entry(entry)
        if command:
            echo_stderr("error: give either --entry or a command after --, not both")
            raise typer.Exit(EXIT_ERROR)
        return entry_command(entry)
    if not command:
        echo_stderr("error: no program to trace: gradfix trace -- python train.py")
        raise typer.Exit(EXIT_ERROR)
    return command


def _print_trace(
    result: TraceResult, fixes: list[TraceFix], output_format: CheckFormat, command: str
) -> None:
    from gradfix.registry import all_rules
    from gradfix.trace.report import (
        display_path,
        finding_dict,
        notes_summary,
        run_summary,
        trace_finding,
    )

    rules = all_rules()
    linked = {id(fix.runtime): fix for fix in fixes if not fix.parts}
    pairs = [(f, linked.get(id(f))) for f in result.findings]
    located = [(display_path(f.path), trace_finding(f, fix, rules)) for f, fix in pairs]
    records = [finding_dict(f, fix, rules) for f, fix in pairs]
    frames = _trace_frames(result, located, rules) if output_format is CheckFormat.text else {}
    print_findings(located, output_format, rules, frames, records)
    echo_stderr(run_summary(result, command))
    notes = notes_summary(result)
    if notes is not None:
        echo_stderr(notes)
    if output_format in (CheckFormat.text, CheckFormat.concise):
        for fix in fixes:
            if fix.verdict is not None:
                path, finding = display_path(fix.runtime.path), fix.finding()
                together = f" ({fix.single.description})" if fix.parts else ""
                typer.echo(
                    f"{path}:{finding.line}:{finding.col}: {finding.code} "
                    f"{fix.verdict[0]}{together}: {shorten(fix.verdict[1])}"
                )
    if output_format is CheckFormat.text:
        typer.echo(check_summary([finding for _, finding in located]))


def _write_trace_report(
    path: str, result: TraceResult, fixes: list[TraceFix], command: str
) -> None:
    from gradfix.registry import all_rules
    from gradfix.trace.report import trace_html

    try:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(trace_html(result, fixes, all_rules(), command))
    except OSError as error:
        echo_stderr(f"error: --report {path}: {error.strerror}")
        raise typer.Exit(EXIT_ERROR) from None


def _write_trace_fixes(fixes: list[TraceFix]) -> None:
    from gradfix.fileio.files import FileError
    from gradfix.trace.link import write_verified

    try:
        written = write_verified(fixes)
    except FileError as error:
        echo_stderr(f"error: {error}")
        raise typer.Exit(EXIT_ERROR) from None
    echo_stderr(f"Applied {count_of(len(written), 'verified fix')}.")


def _trace_frames(
    result: TraceResult, located: list[tuple[str, Finding]], rules: Sequence[type[Rule]]
) -> dict[tuple[str, int, int, str], list[str]]:
    """Each runtime finding's source line with carets, then the error it comes from."""
    from gradfix.formats import code_frames

    frames: dict[tuple[str, int, int, str], list[str]] = {}
    for runtime, (path, finding) in zip(result.findings, located):
        try:
            with open(runtime.path, encoding="utf-8") as handle:
                source = handle.read()
        except (OSError, UnicodeDecodeError):
            continue
        key = (finding.line, finding.col, finding.code)
        frame = code_frames(path, source, [finding], rules).get(key, [])
        error = runtime.evidence.get("error")
        if error:
            frame.append(f"{' ' * len(str(finding.line))} = error: {error}")
        frames[(path, *key)] = frame
    return frames
