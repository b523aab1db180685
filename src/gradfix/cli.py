"""The ``gradfix`` command line: ``check``, ``fix``, ``verify``, ``rules``, ``explain``, ``lsp``.

The commands parse options, call :mod:`gradfix.runner` / :mod:`gradfix.registry` and
format what they return. Output conventions (a public contract, see ``--help``):

- stdout carries the results (finding lines, JSON, diffs, fixed stdin source, summaries of
  ``check``); stderr carries one line per problem (``path: syntax error at line 3: ...``),
  notes, warnings and the summary of ``fix``.
- Exit status 2 means a file could not be processed or the command line is wrong; it beats
  the other codes. Never a traceback, unless ``--verbose``.

The engine and the codemods (LibCST) are imported inside the commands, so ``--help`` and
option errors are quick, and torch is never imported.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import json
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, Optional

import typer

if TYPE_CHECKING:
    from gradfix.config import Config
    from gradfix.proof import FixVerdict
    from gradfix.rule import Finding, Rule
    from gradfix.runner import FileResult, Progress, RunOptions, RunResult
    from gradfix.trace import TraceResult
    from gradfix.trace.link import TraceFix

STDIN_PATH = "-"
#: fewer files than this and no progress bar is shown
PROGRESS_MIN_FILES = 50
DEFAULT_STDIN_NAME = "<stdin>"
EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
#: Ctrl-C (128 + SIGINT)
EXIT_INTERRUPTED = 130


class CheckFormat(str, enum.Enum):
    text = "text"
    concise = "concise"
    json = "json"
    sarif = "sarif"
    github = "github"


class VerifyFormat(str, enum.Enum):
    text = "text"
    json = "json"


class VerifyMode(enum.Enum):
    """How ``fix`` proves its fixes (see :func:`_verify_mode`)."""

    off = "off"  # static: --no-verify, a preview, or torch missing
    default = "default"  # --write: rejected fixes are dropped, unverified follow safety
    strict = "strict"  # --verify: only verified fixes (unverified with --unsafe-fixes)


class RulesFormat(str, enum.Enum):
    text = "text"
    json = "json"


app = typer.Typer(
    name="gradfix",
    help="Find, rewrite and verify PyTorch autograd pitfalls.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)

# --- shared options ------------------------------------------------------------------------

PathsArgument = Annotated[
    Optional[list[str]],  # typer evaluates annotations at run time: no `X | None` on 3.9
    typer.Argument(
        metavar="PATH",
        help="Files or directories to process (default: `.`); `-` reads stdin.",
        show_default=False,
    ),
]
SelectOption = Annotated[
    Optional[list[str]],
    typer.Option(
        "--select",
        metavar="CODES",
        help="Comma-separated rule codes or prefixes to run (`GF1`, `GF201`, `ALL`); "
        "repeatable. Default: the rules enabled by default.",
        show_default=False,
    ),
]
IgnoreOption = Annotated[
    Optional[list[str]],
    typer.Option(
        "--ignore",
        metavar="CODES",
        help="Comma-separated rule codes or prefixes not to run; repeatable.",
        show_default=False,
    ),
]
StdinFilenameOption = Annotated[
    Optional[str],
    typer.Option(
        "--stdin-filename",
        metavar="NAME",
        help="The name of the stdin source in messages (reads stdin when no PATH is given).",
        show_default=False,
    ),
]
JobsOption = Annotated[
    int,
    typer.Option(
        "--jobs",
        "-j",
        min=0,
        help="Worker processes for many files; 0: one per CPU, 1: no workers.",
    ),
]
TimeoutOption = Annotated[
    float,
    typer.Option(
        "--timeout", min=1.0, help="Seconds each execution of a version may take (verification)."
    ),
]
VerifyOption = Annotated[
    Optional[bool],
    typer.Option(
        "--verify/--no-verify",
        help="--verify: execute the code before and after each fix, show the verdicts "
        "and apply only the fixes proven correct (unverified ones too with "
        "--unsafe-fixes; rejected ones never). Default: --write verifies when torch can "
        "be imported and never writes a rejected fix (unverified ones follow the "
        "safe/unsafe classes); --no-verify: no execution at all.",
        show_default=False,
    ),
]
MaxStepsOption = Annotated[
    Optional[int],
    typer.Option(
        "--max-steps",
        min=0,
        help="Stop both versions after this many backward calls (default 20) and compare "
        "what ran, so that a long training script need not finish; 0: no limit.",
        show_default=False,
    ),
]
EntryOption = Annotated[
    Optional[str],
    typer.Option(
        "--entry",
        metavar="MODULE:FUNCTION",
        help="Judge every fix by calling this entry point of the project (imported from "
        "the current directory), before and with the fix.",
        show_default=False,
    ),
]
CommandOption = Annotated[
    Optional[str],
    typer.Option(
        "--cmd",
        metavar="COMMAND",
        help='Judge every fix by running this command (e.g. "pytest tests/x.py") in the '
        "project and in a patched copy of it, recording the gradients of every backward.",
        show_default=False,
    ),
]
ConfigOption = Annotated[
    Optional[list[str]],
    typer.Option(
        "--config",
        metavar="KEY=VALUE",
        help="Override a key of [tool.gradfix] (pyproject.toml / gradfix.toml), the value "
        "in TOML: --config \"ignore=['GF106']\"; repeatable.",
        show_default=False,
    ),
]
ChangedSinceOption = Annotated[
    Optional[str],
    typer.Option(
        "--changed-since",
        metavar="REF",
        help="Only files git lists as changed since REF (committed, staged, unstaged or "
        "untracked), e.g. origin/main.",
        show_default=False,
    ),
]
ReportOption = Annotated[
    Optional[str],
    typer.Option(
        "--report",
        metavar="FILE",
        help="Also write a migration report: every finding, fix (diff) and, with --verify, "
        "verdict, with totals by rule and verdict; .json, .md or .html by the suffix.",
        show_default=False,
    ),
]
CheckReportOption = Annotated[
    Optional[str],
    typer.Option(
        "--report",
        metavar="FILE",
        help="Also write a report: every finding and its fix (diff), with totals by rule; "
        ".json, .md or .html by the suffix.",
        show_default=False,
    ),
]
TraceCommandArgument = Annotated[
    Optional[list[str]],
    typer.Argument(
        metavar="-- COMMAND...",
        help="The program to run, after `--`: `python train.py --lr 0.1`, `pytest tests/`.",
        show_default=False,
    ),
]
TraceEntryOption = Annotated[
    Optional[str],
    typer.Option(
        "--entry",
        metavar="MODULE:FUNCTION",
        help="Run this function of the project (imported from the current directory) "
        "instead of a command.",
        show_default=False,
    ),
]
TraceTimeoutOption = Annotated[
    Optional[float],
    typer.Option("--timeout", min=0.1, help="Stop the program after this many seconds."),
]
TraceMaxStepsOption = Annotated[
    Optional[int],
    typer.Option("--max-steps", min=1, help="Stop the program after N backward calls."),
]
NoCacheOption = Annotated[
    bool,
    typer.Option("--no-cache", help="Do not read or write the result cache (.gradfix_cache)."),
]
VerboseOption = Annotated[
    bool, typer.Option("--verbose", "-v", help="Show tracebacks of internal errors.")
]
QuietOption = Annotated[
    bool,
    typer.Option(
        "--quiet",
        "-q",
        help="Print the results only: no summary, notes or warnings (errors still go to stderr).",
    ),
]


def main() -> None:
    """Console-script entry point (``gradfix = "gradfix.cli:main"``)."""
    verbose = "--verbose" in sys.argv or "-v" in sys.argv
    try:
        app(prog_name="gradfix")
    except KeyboardInterrupt:
        _interrupted()
    except SystemExit as exit_:
        if _caused_by_interrupt(exit_):  # typer turns Ctrl-C into a silent exit 130
            _interrupted()
        raise
    except Exception as error:  # a bug in gradfix itself: one line, not a traceback
        if verbose:
            raise
        _error(
            f"internal error: {type(error).__name__}: {_first_line(error)}"
            " (run with --verbose for the traceback)"
        )
        sys.exit(EXIT_ERROR)


def _interrupted() -> NoReturn:
    """Ctrl-C: one line and exit 130 (128 + SIGINT, the shell's convention). Writes are
    atomic, so every file is either complete (fixed) or as it was."""
    _error("gradfix: interrupted; files already fixed are complete, the others unchanged")
    sys.exit(EXIT_INTERRUPTED)


def _caused_by_interrupt(error: BaseException) -> bool:
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, KeyboardInterrupt):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"gradfix {version('gradfix')}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Show the version and exit."
        ),
    ] = False,
) -> None:
    """Find, rewrite and verify PyTorch autograd pitfalls."""


# --- check ---------------------------------------------------------------------------------


@app.command()
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
         still checked), or a bad option (e.g. an unknown rule code)
      130  interrupted (Ctrl-C)
    """
    from gradfix.runner import RunOptions

    rules, settings = _configure(select, ignore, config)
    if add_noqa:
        _refuse_stdin_for_add_noqa(paths, stdin_filename)
    options = RunOptions(
        rules=rules,
        config=settings,
        cache_dir=_cache_dir(settings, no_cache),
        changed=_changed_files(changed_since),
    )
    run, _ = _run(paths, options, stdin_filename, jobs)
    if add_noqa:
        _add_noqa(run, quiet)
    _report_problems(run, verbose, notes=not quiet)
    if report is not None:
        _write_report(report, run, {})
    findings = sorted(
        ((result.path, finding) for result in run.files for finding in result.findings),
        key=lambda item: (item[0], item[1]),
    )
    if statistics:
        from gradfix.formats import statistics as per_rule

        typer.echo(per_rule(findings, options.rules))
    else:
        frames = _frames(run, options) if output_format is CheckFormat.text else {}
        _print_findings(findings, output_format, options.rules, frames)
        if output_format is CheckFormat.text and not quiet:
            found = [finding for _, finding in findings]
            typer.echo(check_summary(found, len(run.errors), _skipped_cells(run)))
    if run.failed:
        raise typer.Exit(EXIT_ERROR)
    raise typer.Exit(EXIT_FINDINGS if findings else EXIT_CLEAN)


def _print_findings(
    findings: Sequence[tuple[str, Finding]],
    output_format: CheckFormat,
    rules: Sequence[type[Rule]],
    frames: dict[tuple[str, int, int, str], list[str]],
    records: list[dict[str, object]] | None = None,
) -> None:
    """The findings in one of ``check``'s formats (``records``: the JSON objects, when the
    caller adds to :meth:`Finding.to_dict`); text and concise print no summary."""
    if output_format is CheckFormat.json:
        if records is None:
            records = [finding.to_dict(path) for path, finding in findings]
        typer.echo(json.dumps(records, indent=2))
    elif output_format is CheckFormat.sarif:
        from importlib.metadata import version

        from gradfix.formats import sarif_log

        typer.echo(json.dumps(sarif_log(findings, rules, version("gradfix")), indent=2))
    elif output_format is CheckFormat.github:
        from gradfix.formats import github_annotations

        if findings:
            typer.echo(github_annotations(findings))
    else:
        for path, finding in findings:
            typer.echo(finding_line(path, finding))
            for line in frames.get((path, finding.line, finding.col, finding.code), []):
                typer.echo(line)


def _frames(run: RunResult, options: RunOptions) -> dict[tuple[str, int, int, str], list[str]]:
    """The code frame and fix diff of every finding (``check``'s default text format)."""
    from gradfix.formats import code_frames

    frames: dict[tuple[str, int, int, str], list[str]] = {}
    for result in run.files:
        if result.findings and result.original is not None and result.error is None:
            rules = options.rules_for(result.path)
            for key, frame in code_frames(
                result.path, result.original, result.findings, rules
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
            count, result.findings = add_noqa_to_file(result.path, result.findings, result.original)
        except OSError as error:
            result.error = f"cannot add noqa comments: {error.strerror or error}"
            continue
        added, files = added + count, files + (count > 0)
    if not quiet:
        _error(f"Added {_count(added, 'noqa comment')} in {_count(files, 'file')}.")


def _refuse_stdin_for_add_noqa(paths: list[str] | None, stdin_filename: str | None) -> None:
    """``--add-noqa`` writes the files it checked; stdin has no file to write (and the
    file named by ``--stdin-filename`` may hold other text)."""
    if STDIN_PATH in (paths or []) or (not paths and stdin_filename is not None):
        _error("error: --add-noqa writes files and cannot read stdin; give the paths")
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
        text = f"Found {_count(len(findings), 'finding')}{details}."
    return text + _errors_sentence(errors, skipped_cells)


# --- fix -----------------------------------------------------------------------------------


@app.command()
def fix(
    paths: PathsArgument = None,
    write: Annotated[
        bool, typer.Option("--write", "-w", help="Apply the fixes to the files.")
    ] = False,
    unsafe_fixes: Annotated[
        bool, typer.Option("--unsafe-fixes", help="Also apply fixes marked unsafe.")
    ] = False,
    verify: VerifyOption = None,
    timeout: TimeoutOption = 60.0,
    max_steps: MaxStepsOption = None,
    interactive: Annotated[
        bool,
        typer.Option(
            "--interactive",
            "-i",
            help="Review the fixes one at a time (y apply, n skip, a apply all remaining, "
            "q quit); the accepted ones are written at the end. With --verify each verdict "
            "is shown, and `a` applies only the fixes --verify would.",
        ),
    ] = False,
    select: SelectOption = None,
    ignore: IgnoreOption = None,
    config: ConfigOption = None,
    stdin_filename: StdinFilenameOption = None,
    jobs: JobsOption = 0,
    changed_since: ChangedSinceOption = None,
    report: ReportOption = None,
    no_cache: NoCacheOption = False,
    quiet: QuietOption = False,
    verbose: VerboseOption = False,
) -> None:
    """Show the fixes as a unified diff (patience algorithm); write them with --write.

    Without --write nothing is written: the diff goes to stdout (`a/PATH` / `b/PATH`
    headers, `git apply` / `patch -p1` apply it) and a summary to stderr. With --write
    the files are replaced atomically (encoding, newlines and mode kept), the findings
    left are listed on stdout and a summary goes to stderr. With `-` as PATH, stdin is
    fixed and the whole fixed source goes to stdout, and nothing goes to stderr but an
    error (an editor filter: `:%!gradfix fix - --stdin-filename %` in vim). With --write
    each fix is first executed and judged (`gradfix verify`) when torch can be imported:
    a rejected fix is never written, an unverified one follows the safe/unsafe classes;
    the verdict lines go to stderr (--no-verify: nothing is executed). With --verify only
    proven fixes are applied, and in the preview each verdict line precedes the diff.

    \b
    Exit status:
      without --write   0 nothing to change, 1 there is a diff
      --write, or `-`   0 no finding left, 1 findings left that were not fixed
      --interactive     0 whatever was accepted or declined
      always            2 a file or a notebook cell could not be processed, or a
                        file not written (the others are still fixed), or a bad
                        option
      Ctrl-C            130; every file is either completely fixed or untouched
    """
    from gradfix.runner import RunOptions

    rules, settings = _configure(select, ignore, config)
    unsafe_fixes = unsafe_fixes or settings.unsafe_fixes
    reads_stdin = STDIN_PATH in (paths or []) or (not paths and stdin_filename is not None)
    mode = _verify_mode(verify, write=write and not reads_stdin and not interactive)
    options = RunOptions(
        rules=rules,
        fix=True,
        unsafe_fixes=unsafe_fixes,
        write=write,
        config=settings,
        cache_dir=_cache_dir(settings, no_cache or mode is not VerifyMode.off),
        changed=_changed_files(changed_since),
    )
    first = options
    if mode is VerifyMode.strict or interactive:
        first = dataclasses.replace(options, unsafe_fixes=True, write=False)
    elif mode is VerifyMode.default:
        first = dataclasses.replace(options, write=False)  # written once proven
    run, stdin_data = _run(paths, first, stdin_filename, jobs)
    if interactive:
        _report_problems(run, verbose)
        _interactive(run, options, timeout if mode is VerifyMode.strict else None)
    verdicts = {}
    if mode is not VerifyMode.off:
        harness = _harness(timeout, max_steps)
        verdicts = _verify_run(run, options, harness, strict=mode is VerifyMode.strict)
    # stdin is an editor's filter (vim's `:%!`): stdout is the buffer, and whatever goes
    # to stderr may end up in it too, so only errors are reported
    quiet = quiet or stdin_data is not None
    _report_problems(run, verbose, notes=not quiet)
    if report is not None:
        _write_report(report, run, verdicts)
    if stdin_data is not None:
        _emit_fixed_stdin(run.files[0], stdin_data)
    elif write:
        for path, finding in _remaining(run):
            typer.echo(finding_line(path, finding))
    else:
        _emit_diffs(run, verdicts)
    applied = write or stdin_data is not None
    if not quiet:
        _error(fix_summary(run, applied=applied, unsafe_fixes=unsafe_fixes))
    raise typer.Exit(_fix_exit_code(run, applied=applied))


def fix_summary(run: RunResult, *, applied: bool, unsafe_fixes: bool = False) -> str:
    """``Fixed 3 findings in 2 files (1 remaining).`` / ``Would fix ...`` without --write;
    ``Fixed 1 finding (2 fixes) in 1 file.`` when more fixes were applied than findings
    fixed (a later pass fixed what an earlier fix left, or a fix left a finding)."""
    fixed = sum(result.fixed_count for result in run.files)
    fixes = sum(result.applied_count for result in run.files)
    remaining = sum(len(result.remaining) for result in run.files)
    files = sum(1 for result in run.files if result.changed)
    counted = f" ({_count(fixes, 'fix')})" if fixes > fixed else ""
    if fixed:
        verb = "Fixed" if applied else "Would fix"
        text = f"{verb} {_count(fixed, 'finding')}{counted} in {_count(files, 'file')}"
    elif files:  # the fixes changed the code without removing a finding
        text = f"{'Changed' if applied else 'Would change'} {_count(files, 'file')}{counted}"
    else:
        text = "Nothing to fix" if not remaining else "No fixes available"
    if remaining:
        unsafe = 0 if unsafe_fixes else sum(len(r.unsafe_remaining()) for r in run.files)
        more = f", {unsafe} fixable with --unsafe-fixes" if unsafe else ""
        text += f" ({remaining} remaining{more})"
    return text + "." + _errors_sentence(len(run.errors), _skipped_cells(run))


def _fix_exit_code(run: RunResult, *, applied: bool) -> int:
    if run.failed:
        return EXIT_ERROR
    if applied:
        return EXIT_FINDINGS if any(result.remaining for result in run.files) else EXIT_CLEAN
    return EXIT_FINDINGS if any(result.changed for result in run.files) else EXIT_CLEAN


def _verify_run(
    run: RunResult,
    options: RunOptions,
    harness: dict[str, Any],
    *,
    strict: bool = True,
    jobs: int = 2,
) -> dict[str, list[FixVerdict]]:
    """Judge every fix of every changed file (alone, with the file's other fixes, and
    across files with the project's other fixes), then keep (and with --write, write)
    only the accepted ones, once the accepted fixes of a file together are proven.
    ``strict`` (``--verify``, ``verify``): every fix is judged and only verified ones are
    accepted (unverified ones too with --unsafe-fixes); otherwise (``fix --write``'s
    default) only the fixes the safety classes apply are judged, and only rejected ones
    are dropped. ``harness``: keyword arguments of :func:`gradfix.proof.verify_fixes`.
    Verdict lines go to stderr when writing."""
    from gradfix.proof import one_run
    from gradfix.runner import write_result

    with one_run():
        verdicts, candidates = _judge_files(run, options, harness, strict=strict, jobs=jobs)
        _judge_across_files(run, verdicts, candidates, harness)
        for result in run.files:
            found = verdicts.get(result.path)
            if found is None or result.original is None:
                continue
            _keep_accepted(result, found, options, harness, strict=strict)
            if options.write:
                for verdict in found:
                    _error(verdict.line())
                write_result(result)
    return verdicts


def _judge_files(
    run: RunResult, options: RunOptions, harness: dict[str, Any], *, strict: bool, jobs: int
) -> tuple[dict[str, list[FixVerdict]], dict[str, str]]:
    """The verdicts of each changed file's fixes (``jobs`` fixes judged at once), and its
    text with all of them."""
    from gradfix.engine import SourceError
    from gradfix.notebook import is_notebook
    from gradfix.proof import verify_fixes
    from gradfix.runner import write_result
    from gradfix.verify.harness import EntryError

    verdicts: dict[str, list[FixVerdict]] = {}
    candidates: dict[str, str] = {}
    for result in run.files:
        if result.error is not None or not result.changed or result.original is None:
            continue
        if is_notebook(result.path):  # nothing executes notebooks yet: no proof
            if strict:  # ... and no fix; by default, as without verification
                run.warnings.append(f"{result.path}: notebooks cannot be verified yet; skipped")
                result.fixed, result.remaining = result.original, list(result.findings)
            elif options.write:
                write_result(result)
            continue
        unsafe = strict or options.unsafe_fixes
        try:
            found = verify_fixes(
                result.path,
                result.original,
                rules=options.rules,
                unsafe=unsafe,
                jobs=jobs,
                **harness,
            )
        except (SourceError, EntryError) as error:
            result.error = str(error)
            continue
        verdicts[result.path] = found
        candidates[result.path] = result.fixed or result.original
    return verdicts, candidates


def _judge_across_files(
    run: RunResult,
    verdicts: dict[str, list[FixVerdict]],
    candidates: dict[str, str],
    harness: dict[str, Any],
) -> None:
    """A fix stopped by another file's bug in both versions is judged again with the
    fixes of the project's other files in place (those with no rejected fix)."""
    from gradfix.proof import prove_with_project

    sound = {
        path: text
        for path, text in candidates.items()
        if all(v.status != "rejected" for v in verdicts[path])
    }
    for result in run.files:
        if result.path not in verdicts or result.original is None:
            continue
        others = {path: text for path, text in sound.items() if path != result.path}
        verdicts[result.path] = prove_with_project(
            verdicts[result.path], result.original, candidates[result.path], others, **harness
        )


def _keep_accepted(
    result: FileResult,
    found: list[FixVerdict],
    options: RunOptions,
    harness: dict[str, Any],
    *,
    strict: bool,
) -> None:
    """Refix ``result`` with the accepted fixes only; none when together they fail."""
    from gradfix.proof import accepted, finding_key, prove_change
    from gradfix.runner import refix_selected

    assert result.original is not None
    keys = accepted(found, unverified=options.unsafe_fixes or not strict)
    refix_selected(result, options, lambda finding, keys=keys: finding_key(finding) in keys)
    if len(keys) > 1 and result.changed and result.fixed is not None:
        status, reason, _ = prove_change(result.path, result.original, result.fixed, **harness)
        refused = status == "rejected" or (
            status == "unverified" and strict and not options.unsafe_fixes
        )
        if refused:
            _error(f"{result.path}: the accepted fixes together are {status}: {reason}")
            result.fixed, result.remaining = result.original, list(result.findings)


def _emit_diffs(run: RunResult, verdicts: dict[str, list[FixVerdict]] | None = None) -> None:
    from gradfix.diff import file_diff

    for result in sorted(run.files, key=lambda r: r.path):
        for verdict in (verdicts or {}).get(result.path, []):
            typer.echo(verdict.line())
        if result.changed and result.original is not None and result.fixed is not None:
            diff = file_diff(result.original, result.fixed, result.path, result.encoding)
            typer.echo(diff, nl=False)


def _emit_fixed_stdin(result: FileResult, data: bytes) -> None:
    """The fixed source, encoded like the input; the input unchanged when it failed."""
    from gradfix.files import FileError, encode_source

    output = data
    if result.error is None and result.fixed is not None:
        try:
            output = encode_source(result.fixed, result.encoding)
        except FileError as error:
            result.error = str(error)
            _error(f"{result.path}: {error}")
    typer.echo(output, nl=False)


def _remaining(run: RunResult) -> list[tuple[str, Finding]]:
    pairs = [(result.path, finding) for result in run.files for finding in result.remaining]
    return sorted(pairs, key=lambda item: (item[0], item[1]))


# --- verify --------------------------------------------------------------------------------


@app.command()
def verify(
    paths: PathsArgument = None,
    baseline: Annotated[
        bool,
        typer.Option(
            "--baseline",
            help="Judge a refactor made by hand: `gradfix verify --baseline OLD.py NEW.py`.",
        ),
    ] = False,
    output_format: Annotated[
        VerifyFormat,
        typer.Option("--format", help="text: one verdict line per fix; json: an array."),
    ] = VerifyFormat.text,
    timeout: TimeoutOption = 60.0,
    max_steps: MaxStepsOption = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of both executions.")] = 0,
    entry: EntryOption = None,
    command: CommandOption = None,
    select: SelectOption = None,
    ignore: IgnoreOption = None,
    config: ConfigOption = None,
    jobs: Annotated[
        int, typer.Option("--jobs", "-j", min=1, help="Fixes verified at the same time.")
    ] = 2,
    verbose: VerboseOption = False,
) -> None:
    """Prove each fix by execution; nothing is written.

    Every fix is applied alone to the file as read, then the original and the fixed code
    are executed (in a subprocess with a time limit, a memory cap, at most --max-steps
    backward calls, in a temporary mirror of the file's directory that no write reaches
    the project through) and compared. One line per fix:
    `path:line:col: CODE verified|rejected|unverified: reason` -- verified: the fixed
    code keeps the forward results and gives finite gradients equal to the true
    derivative of the original; rejected: a forward result changed, or the gradients are
    still wrong, missing or nan; unverified: the code could not be executed (missing
    import or data, GPU, timeout), calls no backward, or both versions are blocked by the
    same error elsewhere.

    \b
    Exit status:
      0  every fix verified (or no fix at all)
      1  some fix rejected or unverified; with --baseline: NEW is not proven
      2  a file could not be processed, torch is missing, or a bad option
    """
    _require_torch()
    if entry is not None:
        _check_entry(entry)
    if baseline:
        _verify_baseline(paths or [], output_format, timeout, seed)
    from gradfix.runner import RunOptions

    # every fix is judged, the unsafe ones included: that is what verification is for
    rules, settings = _configure(select, ignore, config)
    options = RunOptions(rules=rules, fix=True, unsafe_fixes=True, config=settings)
    run, _ = _run(paths, options, None, 1)
    harness = None
    if command is not None:
        from gradfix.proof import DEFAULT_MAX_STEPS
        from gradfix.verify.command import CommandHarness

        steps = DEFAULT_MAX_STEPS if max_steps is None else max_steps or None
        harness = CommandHarness(command, timeout=timeout, seed=seed, max_steps=steps)
    try:
        limits = _harness(timeout, max_steps, entry=entry, command=harness)
        verdicts = _verify_run(run, options, limits, jobs=jobs)
    finally:
        if harness is not None:
            harness.close()
    _report_problems(run, verbose)
    found = [v for path in sorted(verdicts) for v in verdicts[path]]
    if output_format is VerifyFormat.json:
        typer.echo(json.dumps([v.to_dict() for v in found], indent=2))
    else:
        for verdict in found:
            typer.echo(verdict.line())
    _error(verify_summary(found, len(run.errors)))
    if run.errors:
        raise typer.Exit(EXIT_ERROR)
    raise typer.Exit(EXIT_CLEAN if all(v.status == "verified" for v in found) else EXIT_FINDINGS)


@app.command(context_settings={"ignore_unknown_options": True})
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
) -> None:
    """Run a program once under instrumentation and report the autograd bugs it hits.

    Each finding is pinned to a line of your code (not torch's) and to the rule whose fix
    applies: in-place changes of saved tensors (with the op that saved them), in-place ops
    on leaves, backward through a freed graph, integer tensors asked for grad, cut graphs,
    the op whose backward first gave nan/inf, non-leaf `.grad` reads and graphs kept alive
    by running totals. The program's own output passes through; nothing is written.

    \b
    Exit status:
      0  the program ran and nothing was found
      1  findings
      2  the program could not be started, failed or timed out without a finding,
         or a bad option
    """
    from gradfix.trace import LaunchError, run_trace

    argv = _trace_command(command, entry)
    machine = output_format in (CheckFormat.json, CheckFormat.sarif, CheckFormat.github)
    try:
        result = run_trace(
            argv, timeout=timeout, max_steps=max_steps, stdout=sys.stderr if machine else None
        )
    except LaunchError as error:
        _error(f"error: {error}")
        raise typer.Exit(EXIT_ERROR) from None
    from gradfix.trace.link import link_fixes, prove_fix

    fixes = link_fixes(result.findings)
    if verify_fixes or write:
        for linked in fixes:
            linked.verdict = prove_fix(linked, argv, timeout=timeout or 60.0)
    _print_trace(result, fixes, output_format, " ".join(argv) if entry is None else entry)
    if write:
        _write_trace_fixes(fixes)
    if result.findings:
        raise typer.Exit(EXIT_FINDINGS)
    raise typer.Exit(EXIT_CLEAN if result.status in ("ok", "max-steps") else EXIT_ERROR)


def _trace_command(command: list[str] | None, entry: str | None) -> list[str]:
    from gradfix.trace import entry_command

    if entry is not None:
        _check_entry(entry)
        if command:
            _error("error: give either --entry or a command after --, not both")
            raise typer.Exit(EXIT_ERROR)
        return entry_command(entry)
    if not command:
        _error("error: no program to trace: gradfix trace -- python train.py")
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
    linked = {id(fix.runtime): fix for fix in fixes}
    pairs = [(f, linked.get(id(f))) for f in result.findings]
    located = [(display_path(f.path), trace_finding(f, fix, rules)) for f, fix in pairs]
    records = [finding_dict(f, fix, rules) for f, fix in pairs]
    frames = _trace_frames(result, located, rules) if output_format is CheckFormat.text else {}
    _print_findings(located, output_format, rules, frames, records)
    _error(run_summary(result, command))
    notes = notes_summary(result)
    if notes is not None:
        _error(notes)
    if output_format in (CheckFormat.text, CheckFormat.concise):
        for fix in fixes:
            if fix.verdict is not None:
                path, finding = display_path(fix.runtime.path), fix.finding()
                typer.echo(
                    f"{path}:{finding.line}:{finding.col}: {finding.code} "
                    f"{fix.verdict[0]}: {fix.verdict[1]}"
                )
    if output_format is CheckFormat.text:
        typer.echo(check_summary([finding for _, finding in located]))


def _write_trace_fixes(fixes: list[TraceFix]) -> None:
    from gradfix.files import FileError
    from gradfix.trace.link import write_verified

    try:
        written = write_verified(fixes)
    except FileError as error:
        _error(f"error: {error}")
        raise typer.Exit(EXIT_ERROR) from None
    _error(f"Applied {_count(len(written), 'verified fix')}.")


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


def verify_summary(verdicts: Sequence[FixVerdict], errors: int = 0) -> str:
    """``3 fixes: 2 verified, 1 rejected, 0 unverified.``"""
    if not verdicts:
        return "No fixes to verify." + _errors_sentence(errors)
    counts = {status: 0 for status in ("verified", "rejected", "unverified")}
    for verdict in verdicts:
        counts[verdict.status] = counts.get(verdict.status, 0) + 1
    parts = ", ".join(f"{n} {status}" for status, n in counts.items())
    return f"{_count(len(verdicts), 'fix')}: {parts}." + _errors_sentence(errors)


def _verify_baseline(
    paths: list[str], output_format: VerifyFormat, timeout: float, seed: int
) -> NoReturn:
    from gradfix.proof import verify_baseline

    if len(paths) != 2:
        _error("error: --baseline takes exactly two paths: OLD.py NEW.py")
        raise typer.Exit(EXIT_ERROR)
    old, new = paths
    for path in paths:
        if not os.path.isfile(path):
            _error(f"{path}: no such file")
            raise typer.Exit(EXIT_ERROR)
    status, reason, evidence = verify_baseline(old, new, timeout=timeout, seed=seed)
    if output_format is VerifyFormat.json:
        record = {"old": old, "new": new, "verdict": status, "reason": reason}
        typer.echo(json.dumps({**record, "evidence": evidence}, indent=2))
    else:
        typer.echo(f"{new}: {status}: {reason}")
    raise typer.Exit(EXIT_CLEAN if status == "verified" else EXIT_FINDINGS)


def _check_entry(entry: str) -> None:
    from gradfix.verify.harness import EntryError, parse_entry

    try:
        parse_entry(entry)
    except EntryError as error:
        _error(f"error: {error}")
        raise typer.Exit(EXIT_ERROR) from None


def _harness(timeout: float, max_steps: int | None, **more: Any) -> dict[str, Any]:
    """The keyword arguments of :func:`gradfix.proof.verify_fixes` the options give."""
    limits = {"timeout": timeout, **more}
    if max_steps is not None:
        limits["max_steps"] = max_steps or None  # 0: no limit
    return limits


def _verify_mode(verify: bool | None, *, write: bool) -> VerifyMode:
    """--verify: strict; --no-verify: off; by default --write verifies when torch can be
    imported (a note says when it cannot: static check and fix never need torch)."""
    from gradfix.proof import torch_available

    if verify is not None:
        if verify:
            _require_torch()
        return VerifyMode.strict if verify else VerifyMode.off
    if not write:
        return VerifyMode.off
    if torch_available():
        return VerifyMode.default
    _error(
        "note: torch cannot be imported: the fixes are written without verification "
        "(pip install 'gradfix[verify]' to prove them; --no-verify skips this note)"
    )
    return VerifyMode.off


def _require_torch() -> None:
    from gradfix.proof import torch_available

    if not torch_available():
        _error(
            "error: verification executes the code and needs torch: "
            "pip install 'gradfix[verify]' (static check and fix do not)"
        )
        raise typer.Exit(EXIT_ERROR)


# --- rules and explain -----------------------------------------------------------------------


@app.command()
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


@app.command()
def explain(
    code: Annotated[str, typer.Argument(metavar="CODE", help="A rule code or kebab name.")],
) -> None:
    """Show a rule's documentation (`gradfix explain GF101`)."""
    from gradfix.registry import SelectionError, find_rule

    try:
        rule = find_rule(code)
    except SelectionError as error:
        _error(f"error: {error}")
        raise typer.Exit(EXIT_ERROR) from None
    typer.echo(f"# {rule.code} {rule.name}\n")
    typer.echo(
        f"Fix: {rule.fix_label()}. {rule.fix_sentence()} "
        f"{_default_state(rule).capitalize()} by default.\n"
    )
    typer.echo(rule.docs())


def _default_state(rule: type[Rule]) -> str:
    return "enabled" if rule.default_enabled else "disabled"


# --- lsp -----------------------------------------------------------------------------------


@app.command()
def lsp() -> None:
    """Run the language server on stdin/stdout (for editors: diagnostics, quick fixes,
    fix all, suppress comments, rule docs on hover).

    Settings (initializationOptions or the `gradfix` configuration section): `select`,
    `ignore` (lists of codes) and `verify` (prove each quick fix by execution; needs torch).
    """
    from gradfix.lsp import serve

    raise typer.Exit(serve())


# --- helpers -------------------------------------------------------------------------------


def _interactive(run: RunResult, options: RunOptions, timeout: float | None) -> NoReturn:
    """``fix --interactive``: ask per fix, write each file once at the end."""
    from gradfix.interactive import Reviewer
    from gradfix.runner import write_result

    def ask(prompt: str) -> str:
        typer.echo(prompt, nl=False)
        answer = sys.stdin.readline()
        if not answer:
            typer.echo("")
        return answer

    def verdict(path: str, before: str, after: str) -> tuple[str, str]:
        from gradfix.proof import prove_change

        status, reason, _ = prove_change(path, before, after, timeout=timeout or 60.0)
        return status, reason

    reviewer = Reviewer(
        options.rules, options.unsafe_fixes, ask, typer.echo, verdict if timeout else None
    )
    accepted = refused = 0
    for result in sorted(run.files, key=lambda r: r.path):
        if result.error is not None or not result.changed or result.original is None:
            continue
        if result.path.endswith(".ipynb"):
            _error(f"{result.path}: note: notebooks are not reviewed interactively; skipped")
            continue
        review = reviewer.review(result.path, result.original)
        accepted, refused = accepted + review.accepted, refused + review.refused
        result.fixed = review.current
        if review.changed:
            write_result(result)
            if result.error is not None:
                _error(f"{result.path}: {result.error}")
        if reviewer.stopped:
            break
    written = sum(1 for r in run.files if r.written)
    answered = f"{accepted} accepted one by one" if not reviewer.apply_all else "all remaining"
    if refused:
        answered += f"; {refused} not applied (rejected or unverified)"
    _error(f"Wrote {_count(written, 'file')} ({answered}).")
    raise typer.Exit(EXIT_ERROR if run.failed else EXIT_CLEAN)


def _write_report(path: str, run: RunResult, verdicts: dict[str, list[FixVerdict]]) -> None:
    from gradfix.report import ReportError, write_report

    try:
        write_report(path, run, verdicts)
    except ReportError as error:
        _error(f"error: {error}")
        raise typer.Exit(EXIT_ERROR) from None


def _changed_files(ref: str | None) -> frozenset[str] | None:
    if ref is None:
        return None
    from gradfix.gitfiles import GitError, changed_since

    try:
        return frozenset(changed_since(ref))
    except GitError as error:
        _error(f"error: {error}")
        raise typer.Exit(EXIT_ERROR) from None


def _cache_dir(settings: Config, disabled: bool) -> str | None:
    """``.gradfix_cache`` next to the configuration file (else in the current directory)."""
    from gradfix.cache import CACHE_DIR_NAME

    if disabled or os.environ.get("GRADFIX_NO_CACHE"):
        return None
    return os.path.join(settings.root, CACHE_DIR_NAME)


def _configure(
    select: list[str] | None, ignore: list[str] | None, overrides: list[str] | None
) -> tuple[list[type[Rule]], Config]:
    """The rules to run and the settings, from the configuration file, ``--config``
    overrides and the command line (``--select`` replaces the file's ``select``;
    ``--ignore`` adds to its ``ignore``). Exits with one line on any bad value."""
    from gradfix.config import ConfigError, load_config, resolve_rules
    from gradfix.registry import SelectionError

    try:
        settings = load_config(overrides=overrides or ())
        rules = resolve_rules(settings, select, ignore or ())
    except (ConfigError, SelectionError) as error:  # each names where the value came from
        _error(f"error: {error}")
        raise typer.Exit(EXIT_ERROR) from None
    return rules, settings


def _run(
    paths: list[str] | None, options: RunOptions, stdin_filename: str | None, jobs: int = 1
) -> tuple[RunResult, bytes | None]:
    """Process ``paths`` (or stdin); the stdin bytes are returned for ``fix -``."""
    from gradfix.runner import RunResult, process_bytes, process_paths

    if not paths:
        paths = [STDIN_PATH] if stdin_filename is not None else ["."]
    if STDIN_PATH not in paths:
        with _progress_bar() as progress:
            run = process_paths(paths, options, jobs=jobs or _cpu_count(), progress=progress)
        return run, None
    if len(paths) > 1:
        _error("error: `-` (stdin) cannot be combined with other paths")
        raise typer.Exit(EXIT_ERROR)
    data = sys.stdin.buffer.read()
    result = process_bytes(data, stdin_filename or DEFAULT_STDIN_NAME, options)
    return RunResult(files=[result]), data


@contextlib.contextmanager
def _progress_bar() -> Iterator[Progress | None]:
    """A progress bar with count and ETA on stderr when it is a terminal and the run is
    big enough to wait for; nothing when piped or in CI."""
    if not sys.stderr.isatty() or os.environ.get("CI"):
        yield None
        return
    from rich import progress as rich_progress

    bar = rich_progress.Progress(
        "[progress.description]{task.description}",
        rich_progress.BarColumn(),
        rich_progress.MofNCompleteColumn(),
        rich_progress.TimeRemainingColumn(),
        transient=True,
        console=None,
    )

    def start(total: int) -> Callable[[], None]:
        if total < PROGRESS_MIN_FILES:
            return lambda: None
        bar.start()
        task = bar.add_task("gradfix", total=total)
        return lambda: bar.advance(task)

    try:
        yield start
    finally:
        bar.stop()


def _report_problems(run: RunResult, verbose: bool, *, notes: bool = True) -> None:
    """One stderr line per file that failed and, with ``notes``, per warning, dropped fix
    and skipped file."""
    for warning in run.warnings if notes else []:
        _error(f"warning: {warning}")
    for result in run.files:
        for note in result.dropped if notes else []:
            _error(f"{result.path}: note: {note}")
        for cell in result.skipped_cells:
            _error(f"{result.path}:{cell}")
        if notes and result.skipped is not None and result.skipped != "generated":
            _error(f"{result.path}: skipped: {result.skipped}")
        if result.error is None:
            continue
        hint = ""
        if result.traceback is not None and not verbose:
            hint = " (run with --verbose for the traceback)"
        _error(f"{result.path}: {result.error}{hint}")
        if result.traceback is not None and verbose:
            _error(result.traceback.rstrip())


def _cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on every platform
        return os.cpu_count() or 1


def _errors_sentence(errors: int, skipped_cells: int = 0) -> str:
    text = f" {_count(errors, 'file')} could not be processed." if errors else ""
    if skipped_cells:
        text += f" {_count(skipped_cells, 'notebook cell')} could not be parsed (skipped)."
    return text


def _skipped_cells(run: RunResult) -> int:
    return sum(len(result.skipped_cells) for result in run.files)


def _count(number: int, noun: str) -> str:
    plural = "es" if noun.endswith(("x", "s")) else "s"
    return f"{number} {noun}{'' if number == 1 else plural}"


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else ""


def _error(message: str) -> None:
    typer.echo(message, err=True)


if __name__ == "__main__":  # pragma: no cover
    main()
