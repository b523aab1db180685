"""The ``verify`` command: prove each fix by execution, or a hand-made refactor (``--baseline``)."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

from gradfix.cli.common import (
    EXIT_CLEAN,
    EXIT_ERROR,
    EXIT_FINDINGS,
    PROGRESS_MIN_FIXES,
    cluster,
    configure,
    count_of,
    echo_stderr,
    errors_sentence,
    progress_bar,
    report_problems,
    run_files,
)
from gradfix.cli.options import (
    CommandOption,
    ConfigOption,
    EntryOption,
    ExecutorKind,
    ExecutorOption,
    IgnoreOption,
    MaxStepsOption,
    PathsArgument,
    RayAddressOption,
    SelectOption,
    TimeoutOption,
    VerboseOption,
    VerifyFormat,
)
from gradfix.cli.proving import (
    command_harness,
    drive_options,
    harness_limits,
    require_torch,
    verify_run,
)
from gradfix.shorten import shorten

if TYPE_CHECKING:
    from gradfix.proof import FixVerdict


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
    executor: ExecutorOption = ExecutorKind.local,
    ray_address: RayAddressOption = None,
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
    require_torch()
    drive_options(entry, command, verifies=True)
    if baseline:
        _verify_baseline(paths or [], output_format, timeout, seed)
    from gradfix.runner import RunOptions

    # every fix is judged, the unsafe ones included: that is what verification is for
    rules, settings = configure(select, ignore, config)
    options = RunOptions(rules=rules, fix=True, unsafe_fixes=True, config=settings)
    with (
        cluster(executor, ray_address, ship=".") as on,
        command_harness(command, timeout, max_steps, seed) as harness,
    ):
        run, _ = run_files(paths, options, None, 1, on)
        limits = harness_limits(timeout, max_steps, entry=entry, command=harness)
        with progress_bar("proving", PROGRESS_MIN_FIXES, noun="fix") as progress:
            verdicts = verify_run(run, options, limits, jobs=jobs, executor=on, progress=progress)
    report_problems(run, verbose)
    found = [v for path in sorted(verdicts) for v in verdicts[path]]
    if output_format is VerifyFormat.json:
        typer.echo(json.dumps([v.to_dict() for v in found], indent=2))
    else:
        for verdict in found:
            typer.echo(verdict.line())
    echo_stderr(verify_summary(found, len(run.errors)))
    if run.errors:
        raise typer.Exit(EXIT_ERROR)
    raise typer.Exit(EXIT_CLEAN if all(v.status == "verified" for v in found) else EXIT_FINDINGS)


def verify_summary(verdicts: Sequence[FixVerdict], errors: int = 0) -> str:
    """``3 fixes: 2 verified, 1 rejected, 0 unverified.``"""
    if not verdicts:
        return "No fixes to verify." + errors_sentence(errors)
    counts = {status: 0 for status in ("verified", "rejected", "unverified")}
    for verdict in verdicts:
        counts[verdict.status] = counts.get(verdict.status, 0) + 1
    parts = ", ".join(f"{n} {status}" for status, n in counts.items())
    return f"{count_of(len(verdicts), 'fix')}: {parts}." + errors_sentence(errors)


def _verify_baseline(
    paths: list[str], output_format: VerifyFormat, timeout: float, seed: int
) -> NoReturn:
    from gradfix.proof import verify_baseline

    if len(paths) != 2:
        echo_stderr("error: --baseline takes exactly two paths: OLD.py NEW.py")
        raise typer.Exit(EXIT_ERROR)
    old, new = paths
    for path in paths:
        if not os.path.isfile(path):
            echo_stderr(f"{path}: no such file")
            raise typer.Exit(EXIT_ERROR)
    status, reason, evidence = verify_baseline(old, new, timeout=timeout, seed=seed)
    if output_format is VerifyFormat.json:
        record = {"old": old, "new": new, "verdict": status, "reason": reason}
        typer.echo(json.dumps({**record, "evidence": evidence}, indent=2))
    else:
        typer.echo(f"{new}: {status}: {shorten(reason)}")
    raise typer.Exit(EXIT_CLEAN if status == "verified" else EXIT_FINDINGS)
