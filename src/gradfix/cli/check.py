"""The ``check`` command: report the findings in one of its formats, or add noqa comments."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated

import typer

from gradfix.cli.common import (
    EXIT_CLEAN,
    EXIT_ERROR,
    EXIT_FINDINGS,
    STDIN_PATH,
    cache_dir,
    changed_files,
    cluster,
    configure,
    count_of,
    count_skipped_cells,
    echo_stderr,
    errors_sentence,
    nothing_checked,
    paths_or_default,
    report_problems,
    run_files,
    write_report_file,
)
from gradfix.cli.options import (
    ChangedSinceOption,
    CheckFormat,
    CheckReportOption,
    ConfigOption,
    ExecutorKind,
    ExecutorOption,
    IgnoreOption,
    JobsOption,
    NoCacheOption,
    PathsArgument,
    QuietOption,
    RayAddressOption,
    SelectOption,
    StdinFilenameOption,
    VerboseOption,
)

if TYPE_CHECKING:
    from gradfix.formats import Positions
    from gradfix.rule import Finding, Rule
    from gradfix.runner import RunOptions, RunResult


def check(
    paths: PathsArgument = None,
    output_format: Annotated[
        CheckFormat,
        typer.Option(
            "--format",
            help="text: per finding a `path:line:col: CODE message` line, its code frame "
            "and its fix's diff, then a summary; concise: one such line per finding and "
            "nothing else; json: an array of findings; sarif: a SARIF 2.1.0 log; github: "
            "GitHub Actions workflow annotations.",
        ),
    ] = CheckFormat.text,
    statistics: Annotated[
        bool,
        typer.Option(
            "--statistics",
            help="Print the number of findings per rule and the total ([*]: every finding "
            "of the rule has a safe fix) instead of the findings.",
        ),
    ] = False,
    add_noqa: Annotated[
        bool,
        typer.Option(
            "--add-noqa",
            help="Write a `# noqa: CODE` comment on every line with a finding (to adopt "
            "gradfix on an existing codebase; in a notebook, into the cell); prints how "
            "many were added and reports only the findings it could not silence.",
        ),
    ] = False,
    select: SelectOption = None,
    ignore: IgnoreOption = None,
    config: ConfigOption = None,
    stdin_filename: StdinFilenameOption = None,
    jobs: JobsOption = 0,
    executor: ExecutorOption = ExecutorKind.local,
    ray_address: RayAddressOption = None,
    changed_since: ChangedSinceOption = None,
    report: CheckReportOption = None,
    no_cache: NoCacheOption = False,
    quiet: QuietOption = False,
    verbose: VerboseOption = False,
) -> None:
    """Report autograd pitfalls: per finding a `path:line:col: CODE message` line with
    its code frame and the diff of its fix (`--format concise`: the lines only).

    \b
    Exit status:
      0  no findings
      1  findings
      2  a file or a notebook cell could not be processed (the others are
         still checked), no file could be checked (each too large or
         unreadable), or a bad option (e.g. an unknown rule code)
      130  interrupted (Ctrl-C)
    """
    from gradfix.runner import RunOptions

    rules, settings = configure(select, ignore, config)
    if add_noqa:
        _refuse_stdin_for_add_noqa(paths, stdin_filename)
    options = RunOptions(
        rules=rules,
        config=settings,
        cache_dir=cache_dir(settings, no_cache),
        changed=changed_files(changed_since),
        # the text format's code frames show each fix alone: made by the same lint
        singles=output_format is CheckFormat.text and not statistics,
    )
    with cluster(executor, ray_address) as on:
        run, _ = run_files(paths, options, stdin_filename, jobs, on, quiet=quiet)
    if add_noqa:
        _add_noqa(run, quiet)
    report_problems(run, verbose, notes=not quiet)
    if report is not None:
        write_report_file(report, run, {})
    findings = sorted(
        ((result.path, finding) for result in run.files for finding in result.findings),
        key=lambda item: (item[0], item[1]),
    )
    unchecked = nothing_checked(run)
    text_summary = output_format is CheckFormat.text and not statistics and not quiet
    if statistics:
        from gradfix.formats import statistics as per_rule

        typer.echo(per_rule(findings, options.rules))
    else:
        frames = _frames(run, options) if output_format is CheckFormat.text else {}
        print_findings(findings, output_format, options.rules, frames, positions=_positions(run))
        if text_summary:
            found = [finding for _, finding in findings]
            summary = check_summary(found, len(run.errors), count_skipped_cells(run))
            typer.echo(unchecked or summary)
    if unchecked is not None and not text_summary and not quiet:
        echo_stderr(unchecked)  # stdout holds the report of the format
    if run.failed or unchecked is not None:
        raise typer.Exit(EXIT_ERROR)
    raise typer.Exit(EXIT_FINDINGS if findings else EXIT_CLEAN)


def print_findings(
    findings: Sequence[tuple[str, Finding]],
    output_format: CheckFormat,
    rules: Sequence[type[Rule]],
    frames: dict[tuple[str, int, int, str], list[str]],
    records: list[dict[str, object]] | None = None,
    positions: Positions | None = None,
) -> None:
    """The findings in one of ``check``'s formats (``records``: the JSON objects, when the
    caller adds to :meth:`Finding.to_dict`); text and concise print no summary. SARIF and
    GitHub annotations place a notebook's findings in its JSON text (``positions``)."""
    if output_format is CheckFormat.json:
        if records is None:
            records = [finding.to_dict(path) for path, finding in findings]
        typer.echo(json.dumps(records, indent=2))
    elif output_format is CheckFormat.sarif:
        from importlib.metadata import version

        from gradfix.formats import sarif_log

        log = sarif_log(findings, rules, version("gradfix"), positions)
        typer.echo(json.dumps(log, indent=2))
    elif output_format is CheckFormat.github:
        from gradfix.formats import github_annotations

        if findings:
            typer.echo(github_annotations(findings, positions))
    else:
        for path, finding in findings:
            typer.echo(finding_line(path, finding))
            for line in frames.get((path, finding.line, finding.col, finding.code), []):
                typer.echo(line)


def _positions(run: RunResult) -> Positions:
    """Where each notebook with findings stores its cells' code in its JSON text."""
    from gradfix.notebook import source_position

    positions = {}
    for result in run.files:
        if result.original is not None and any(f.cell for f in result.findings):
            position = source_position(result.original)
            if position is not None:
                positions[result.path] = position
    return positions


def _frames(run: RunResult, options: RunOptions) -> dict[tuple[str, int, int, str], list[str]]:
    """The code frame and fix diff of every finding (``check``'s default text format)."""
    from gradfix.formats import code_frames

    frames: dict[tuple[str, int, int, str], list[str]] = {}
    for result in run.files:
        if result.findings and result.original is not None and result.error is None:
            rules = options.rules_for(result.path)
            for key, frame in code_frames(
                result.path, result.original, result.findings, rules, result.singles
            ).items():
                frames[(result.path, *key)] = frame
    return frames


def _add_noqa(run: RunResult, quiet: bool) -> None:
    """``check --add-noqa``: comment the line of every finding. The findings silenced are
    no longer reported (only those on a line that cannot take a comment stay)."""
    from gradfix.noqa import add_noqa_to_file

    added = files = 0
    for result in run.files:
        if result.error is not None or not result.findings:
            continue
        try:
            count, result.findings = add_noqa_to_file(
                result.path, result.findings, result.original, run.tree
            )
        except OSError as error:
            result.error = f"cannot add noqa comments: {error.strerror or error}"
            continue
        added, files = added + count, files + (count > 0)
    if not quiet:
        echo_stderr(f"Added {count_of(added, 'noqa comment')} in {count_of(files, 'file')}.")


def _refuse_stdin_for_add_noqa(paths: list[str] | None, stdin_filename: str | None) -> None:
    """``--add-noqa`` writes the files it checked; stdin has no file to write (and the
    file named by ``--stdin-filename`` may hold other text)."""
    if STDIN_PATH in paths_or_default(paths, stdin_filename):
        echo_stderr("error: --add-noqa writes files and cannot read stdin; give the paths")
        raise typer.Exit(EXIT_ERROR)


def finding_line(path: str, finding: Finding) -> str:
    return f"{finding.location(path)}: {finding.code} {finding.message}"


def check_summary(findings: Sequence[Finding], errors: int = 0, skipped_cells: int = 0) -> str:
    """``Found 3 findings (2 fixable with `gradfix fix`, 1 with --unsafe-fixes).``"""
    if not findings:
        text = "No findings." if errors or skipped_cells else "All checks passed."
    else:
        safe = sum(1 for f in findings if f.fix is not None and f.fix.safety == "safe")
        unsafe = sum(1 for f in findings if f.fix is not None and f.fix.safety == "unsafe")
        fixable = []
        if safe:
            fixable.append(f"{safe} fixable with `gradfix fix`")
        if unsafe:
            fixable.append(
                f"{unsafe} with --unsafe-fixes"
                if safe
                else f"{unsafe} fixable with `gradfix fix --unsafe-fixes`"
            )
        details = f" ({', '.join(fixable)})" if fixable else ""
        text = f"Found {count_of(len(findings), 'finding')}{details}."
    return text + errors_sentence(errors, skipped_cells)
