"""The ``fix`` command: show the fixes as a diff, write them, or review them one by one."""

from __future__ import annotations

import dataclasses
import sys
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from gradfix.cli.check import finding_line
from gradfix.cli.common import (
    EXIT_CLEAN,
    EXIT_ERROR,
    EXIT_FINDINGS,
    PROGRESS_MIN_FIXES,
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
    progress_bar,
    report_problems,
    run_files,
    write_report_file,
)
from gradfix.cli.options import (
    ChangedSinceOption,
    CommandOption,
    ConfigOption,
    EntryOption,
    ExecutorKind,
    ExecutorOption,
    IgnoreOption,
    JobsOption,
    MaxStepsOption,
    NoCacheOption,
    PathsArgument,
    QuietOption,
    RayAddressOption,
    ReportOption,
    SelectOption,
    StdinFilenameOption,
    TimeoutOption,
    VerboseOption,
    VerifyOption,
)
from gradfix.cli.proving import (
    VerifyMode,
    command_harness,
    drive_options,
    harness_limits,
    verify_mode,
    verify_run,
)

if TYPE_CHECKING:
    from gradfix.proof import FixVerdict
    from gradfix.rule import Finding
    from gradfix.runner import FileResult, RunOptions, RunResult


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
    entry: EntryOption = None,
    command: CommandOption = None,
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
    executor: ExecutorOption = ExecutorKind.local,
    ray_address: RayAddressOption = None,
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
      --interactive     0 no finding left, 1 findings left (declined, not
                        proven, or without a fix)
      always            2 a file or a notebook cell could not be processed, or a
                        file not written (the others are still fixed), no file
                        could be checked (each too large or unreadable), or a
                        bad option
      Ctrl-C            130; every file is either completely fixed or untouched
    """
    from gradfix.runner import RunOptions, refuse_unwritable

    rules, settings = configure(select, ignore, config)
    unsafe_fixes = unsafe_fixes or settings.unsafe_fixes
    reads_stdin = STDIN_PATH in paths_or_default(paths, stdin_filename)
    mode = verify_mode(verify, write=write and not reads_stdin and not interactive)
    options = RunOptions(
        rules=rules,
        fix=True,
        unsafe_fixes=unsafe_fixes,
        write=write,
        config=settings,
        cache_dir=cache_dir(settings, no_cache or mode is not VerifyMode.off),
        changed=changed_files(changed_since),
    )
    first = options
    if mode is VerifyMode.strict or interactive:
        first = dataclasses.replace(options, unsafe_fixes=True, write=False)
    elif mode is VerifyMode.default:
        first = dataclasses.replace(options, write=False)  # written once proven
    ship = "." if mode is not VerifyMode.off else None  # the fixes are run there
    drive_options(entry, command, verifies=mode is not VerifyMode.off)
    with (
        cluster(executor, ray_address, ship) as on,
        command_harness(command, timeout, max_steps) as driver,
    ):
        run, stdin_data = run_files(paths, first, stdin_filename, jobs, on, quiet=quiet)
        if write and not first.write and stdin_data is None:
            refuse_unwritable(run)  # before running any of their code to prove a fix
        harness = harness_limits(timeout, max_steps, entry=entry, command=driver)
        if interactive:
            report_problems(run, verbose)
            _interactive(run, options, harness if mode is VerifyMode.strict else None)
        verdicts = {}
        if mode is not VerifyMode.off:
            strict = mode is VerifyMode.strict
            with progress_bar("proving", PROGRESS_MIN_FIXES, noun="fix", quiet=quiet) as progress:
                verdicts = verify_run(
                    run, options, harness, strict=strict, executor=on, progress=progress
                )
    # stdin is an editor's filter (vim's `:%!`): stdout is the buffer, and whatever goes
    # to stderr may end up in it too, so only errors are reported
    quiet = quiet or stdin_data is not None
    report_problems(run, verbose, notes=not quiet)
    if report is not None:
        write_report_file(report, run, verdicts)
    if stdin_data is not None:
        _emit_fixed_stdin(run.files[0], stdin_data)
    elif write:
        for path, finding in _remaining(run):
            typer.echo(finding_line(path, finding))
    else:
        _emit_diffs(run, verdicts)
    applied = write or stdin_data is not None
    if not quiet:
        echo_stderr(fix_summary(run, applied=applied, unsafe_fixes=unsafe_fixes))
    raise typer.Exit(_fix_exit_code(run, applied=applied))


def fix_summary(run: RunResult, *, applied: bool, unsafe_fixes: bool = False) -> str:
    """``Fixed 3 findings in 2 files (1 remaining).`` / ``Would fix ...`` without --write;
    ``Fixed 1 finding (2 fixes) in 1 file.`` when more fixes were applied than findings
    fixed (a later pass fixed what an earlier fix left, or a fix left a finding);
    ``Nothing was checked: ...`` when no file could be (:func:`nothing_checked`)."""
    unchecked = nothing_checked(run)
    if unchecked is not None:
        return unchecked
    fixed = sum(result.fixed_count for result in run.files)
    fixes = sum(result.applied_count for result in run.files)
    remaining = sum(len(result.remaining) for result in run.files)
    files = sum(1 for result in run.files if result.changed)
    counted = f" ({count_of(fixes, 'fix')})" if fixes > fixed else ""
    held = [reason for result in run.files for reason in result.held]
    if fixed:
        verb = "Fixed" if applied else "Would fix"
        text = f"{verb} {count_of(fixed, 'finding')}{counted} in {count_of(files, 'file')}"
    elif files:  # the fixes changed the code without removing a finding
        text = f"{'Changed' if applied else 'Would change'} {count_of(files, 'file')}{counted}"
    elif held:
        text = "No fixes applied" if applied else "No fixes would be applied"
    else:
        text = "Nothing to fix" if not remaining else "No fixes available"
    if remaining:
        unsafe = 0 if unsafe_fixes else sum(len(r.unsafe_remaining()) for r in run.files)
        more = f", {unsafe} fixable with --unsafe-fixes" if unsafe else ""
        if held:
            more = ": " + ", ".join(_why_remaining(run, held, unsafe))
        text += f" ({remaining} remaining{more})"
    return text + "." + errors_sentence(len(run.errors), count_skipped_cells(run))


def _why_remaining(run: RunResult, held: list[str], unsafe: int) -> list[str]:
    """``5 fixes rejected by verification``, ``2 findings without a fix``...: why each
    finding left was not fixed, once verification held fixes back."""
    import collections

    parts = [f"{count_of(n, 'fix')} {why}" for why, n in collections.Counter(held).items()]
    if unsafe:
        parts.append(f"{unsafe} fixable with --unsafe-fixes")
    without = sum(1 for r in run.files for finding in r.remaining if finding.fix is None)
    if without:
        parts.append(f"{count_of(without, 'finding')} without a fix")
    return parts


def _fix_exit_code(run: RunResult, *, applied: bool) -> int:
    if run.failed or nothing_checked(run) is not None:
        return EXIT_ERROR
    if applied:
        return EXIT_FINDINGS if any(result.remaining for result in run.files) else EXIT_CLEAN
    return EXIT_FINDINGS if any(result.changed for result in run.files) else EXIT_CLEAN


def _emit_diffs(run: RunResult, verdicts: dict[str, list[FixVerdict]] | None = None) -> None:
    from gradfix.fileio.diff import file_diff

    for result in sorted(run.files, key=lambda r: r.path):
        for verdict in (verdicts or {}).get(result.path, []):
            typer.echo(verdict.line())
        if result.changed and result.original is not None and result.fixed is not None:
            diff = file_diff(result.original, result.fixed, result.path, result.encoding)
            typer.echo(diff, nl=False)


def _emit_fixed_stdin(result: FileResult, data: bytes) -> None:
    """The fixed source, encoded like the input; the input unchanged when it failed."""
    from gradfix.fileio.files import FileError, encode_source

    output = data
    if result.error is None and result.fixed is not None:
        try:
            output = encode_source(result.fixed, result.encoding)
        except FileError as error:
            result.error = str(error)
            echo_stderr(f"{result.path}: {error}")
    typer.echo(output, nl=False)


def _remaining(run: RunResult) -> list[tuple[str, Finding]]:
    pairs = [(result.path, finding) for result in run.files for finding in result.remaining]
    return sorted(pairs, key=lambda item: (item[0], item[1]))


def _interactive(run: RunResult, options: RunOptions, harness: dict[str, Any] | None) -> NoReturn:
    """``fix --interactive``: ask per fix, write each file once at the end; with
    ``harness`` (:func:`harness_limits`, ``--verify``), each fix's verdict is shown."""
    from gradfix.interactive import Reviewer
    from gradfix.runner import write_result

    def ask(prompt: str) -> str:
        typer.echo(prompt, nl=False)
        answer = sys.stdin.readline()
        if not answer:
            typer.echo("")
        return answer

    def verdict(path: str, before: str, after: str, codes: list[str]) -> tuple[str, str]:
        from gradfix.proof import prove_change

        status, reason, _ = prove_change(path, before, after, rules=codes, **(harness or {}))
        return status, reason

    reviewer = Reviewer(
        options.rules, options.unsafe_fixes, ask, typer.echo, verdict if harness else None
    )
    accepted = refused = rejected = 0
    left = {result.path: len(result.findings) for result in run.files}
    for result in sorted(run.files, key=lambda r: r.path):
        if reviewer.stopped:  # q: the files after it keep their findings
            break
        if result.error is not None or not result.changed or result.original is None:
            continue
        if result.path.endswith(".ipynb"):
            echo_stderr(f"{result.path}: note: notebooks are not reviewed interactively; skipped")
            continue
        review = reviewer.review(result.path, result.original)
        accepted, refused = accepted + review.accepted, refused + review.refused
        rejected += review.rejected
        result.fixed = review.current
        if review.changed:
            left[result.path] = _findings_left(review.current, result.path, options)
            write_result(result, run.tree)
            if result.error is not None:
                echo_stderr(f"{result.path}: {result.error}")
    written = sum(1 for r in run.files if r.written)
    answered = f"{accepted} accepted one by one" if not reviewer.apply_all else "all remaining"
    if rejected:
        answered += f"; {rejected} rejected by verification"
    if refused - rejected:
        answered += f"; {refused - rejected} unverified (applied only with --unsafe-fixes)"
    remaining = sum(left.values())
    more = f"; {count_of(remaining, 'finding')} remaining" if remaining else ""
    echo_stderr(f"Wrote {count_of(written, 'file')} ({answered}){more}.")
    if run.failed or nothing_checked(run) is not None:
        raise typer.Exit(EXIT_ERROR)
    raise typer.Exit(EXIT_FINDINGS if remaining else EXIT_CLEAN)


def _findings_left(source: str, path: str, options: RunOptions) -> int:
    """The findings of the reviewed text (fixes declined, or refused by the verifier, and
    findings no rule fixes), as ``fix --write`` counts what it leaves."""
    from gradfix.engine import lint_source

    return len(lint_source(source, rules=options.rules_for(path), path=path).findings)
