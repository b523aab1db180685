"""What the commands share: exit codes, reading the configuration, running the engine on the
paths or stdin (with a progress bar), and the lines on stderr."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:
    from gradfix.cli.options import ExecutorKind
    from gradfix.config import Config
    from gradfix.proof import FixVerdict
    from gradfix.rule import Rule
    from gradfix.runner import Executor, Progress, RunOptions, RunResult


STDIN_PATH = "-"
#: fewer files than this and no progress bar is shown
PROGRESS_MIN_FILES = 50
#: fewer fixes to prove than this and no progress bar is shown (each takes seconds)
PROGRESS_MIN_FIXES = 2
DEFAULT_STDIN_NAME = "<stdin>"
EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
#: Ctrl-C (128 + SIGINT)
EXIT_INTERRUPTED = 130


def check_entry(entry: str) -> None:
    from gradfix.verify.harness import EntryError, parse_entry

    try:
        parse_entry(entry)
    except EntryError as error:
        echo_stderr(f"error: {error}")
        raise typer.Exit(EXIT_ERROR) from None


def write_report_file(path: str, run: RunResult, verdicts: dict[str, list[FixVerdict]]) -> None:
    from gradfix.report import ReportError, write_report

    try:
        write_report(path, run, verdicts)
    except ReportError as error:
        echo_stderr(f"error: {error}")
        raise typer.Exit(EXIT_ERROR) from None


def changed_files(ref: str | None) -> frozenset[str] | None:
    if ref is None:
        return None
    from gradfix.fileio.gitfiles import GitError, changed_since

    try:
        return frozenset(changed_since(ref))
    except GitError as error:
        echo_stderr(f"error: {error}")
        raise typer.Exit(EXIT_ERROR) from None


def cache_dir(settings: Config, disabled: bool) -> str | None:
    """``.gradfix_cache`` next to the configuration file (else in the current directory)."""
    from gradfix.cache import CACHE_DIR_NAME

    if disabled or os.environ.get("GRADFIX_NO_CACHE"):
        return None
    return os.path.join(settings.root, CACHE_DIR_NAME)


def configure(
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
        echo_stderr(f"error: {error}")
        raise typer.Exit(EXIT_ERROR) from None
    return rules, settings


def paths_or_default(paths: list[str] | None, stdin_filename: str | None) -> list[str]:
    """The paths given; without any, stdin when ``--stdin-filename`` names it, else ``.``."""
    if paths:
        return paths
    return [STDIN_PATH] if stdin_filename is not None else ["."]


def run_files(
    paths: list[str] | None,
    options: RunOptions,
    stdin_filename: str | None,
    jobs: int = 1,
    executor: Executor | None = None,
    *,
    quiet: bool = False,
) -> tuple[RunResult, bytes | None]:
    """Process ``paths`` (or stdin) on this machine or on a cluster (``executor``, from
    :func:`cluster`), with a progress bar unless ``quiet``; the stdin bytes are returned
    for ``fix -``."""
    from gradfix.runner import RunResult, process_bytes, process_paths

    paths = paths_or_default(paths, stdin_filename)
    if STDIN_PATH not in paths:
        with progress_bar(quiet=quiet) as progress:
            run = process_paths(
                paths, options, jobs=jobs or _cpu_count(), progress=progress, executor=executor
            )
        return run, None
    if len(paths) > 1:
        echo_stderr("error: `-` (stdin) cannot be combined with other paths")
        raise typer.Exit(EXIT_ERROR)
    data = sys.stdin.buffer.read()
    result = process_bytes(data, stdin_filename or DEFAULT_STDIN_NAME, options)
    return RunResult(files=[result]), data


@contextlib.contextmanager
def cluster(
    executor: ExecutorKind | None, address: str | None, ship: str | None = None
) -> Iterator[Executor | None]:
    """The Ray executor of ``--executor ray`` for the run (``None``: the local pool),
    with the project directory ``ship`` shipped to it to verify fixes there; one line
    and exit 2 when Ray is missing, the cluster cannot be reached, the project is too
    large to ship or the cluster fails during the run (again, after a restart)."""
    from gradfix.cli.options import ExecutorKind

    if executor is not ExecutorKind.ray:
        if address is not None:
            echo_stderr("error: --ray-address needs --executor ray")
            raise typer.Exit(EXIT_ERROR)
        yield None
        return
    from gradfix.ray_executor import ClusterFailed, RayExecutor, RayMissing, SnapshotTooLarge

    try:
        ray_executor = RayExecutor(address, ship=ship)
        ray_executor.__enter__()
    except (RayMissing, SnapshotTooLarge) as error:
        echo_stderr(f"error: {error}")
        raise typer.Exit(EXIT_ERROR) from None
    except Exception as error:  # ConnectionError, Ray's own: one line
        first = (str(error).strip().splitlines() or [type(error).__name__])[0]
        echo_stderr(f"error: cannot start or reach the Ray cluster: {first}")
        raise typer.Exit(EXIT_ERROR) from None
    try:
        yield ray_executor
    except ClusterFailed as error:  # failed again after a restart, or not ours to restart
        echo_stderr(f"error: the Ray cluster failed during the run: {error}")
        raise typer.Exit(EXIT_ERROR) from None
    finally:
        ray_executor.__exit__(None, None, None)


@contextlib.contextmanager
def progress_bar(
    label: str = "gradfix",
    minimum: int = PROGRESS_MIN_FILES,
    *,
    noun: str = "file",
    quiet: bool = False,
) -> Iterator[Progress | None]:
    """A progress bar on stderr when it is a terminal, the run is not ``--quiet`` and it
    is big enough to wait for (``minimum`` items: files, or fixes to prove): how many
    are done of the total (``120/2860 files``; ``fix 3 of 8`` with ``noun="fix"``), the
    rate and the time left; nothing when piped or in CI."""
    if quiet or not sys.stderr.isatty() or os.environ.get("CI"):
        yield None
        return
    from rich import progress as rich_progress
    from rich.console import Console

    bar = rich_progress.Progress(
        "[progress.description]{task.description}",
        rich_progress.BarColumn(),
        _count_column(noun),
        _rate_column(noun),
        rich_progress.TimeRemainingColumn(),
        transient=True,
        console=Console(stderr=True),  # stdout is the report, or a diff, maybe piped
    )

    def start(total: int) -> Callable[[], None]:
        if total < minimum:
            return lambda: None
        bar.start()
        task = bar.add_task(label, total=total)
        return lambda: bar.advance(task)

    try:
        yield start
    finally:
        bar.stop()


def _count_column(noun: str) -> Any:
    """``fix 3 of 8``, or ``120/2860 files``."""
    from rich.progress import TextColumn

    if noun == "fix":
        return TextColumn("fix {task.completed:.0f} of {task.total:.0f}")
    return TextColumn(f"{{task.completed:.0f}}/{{task.total:.0f}} {noun}s")


def _rate_column(noun: str) -> Any:
    """Items per second (seconds per item when slower than one a second)."""
    from rich.progress import ProgressColumn
    from rich.text import Text

    plural = f"{noun}es" if noun.endswith(("x", "s")) else f"{noun}s"

    class Rate(ProgressColumn):  # type: ignore[misc]
        def render(self, task: Any) -> Text:
            speed = task.finished_speed or task.speed
            if not speed:
                return Text(f"- {plural}/s", style="progress.data.speed")
            if speed < 1:
                return Text(f"{1 / speed:.1f} s/{noun}", style="progress.data.speed")
            return Text(f"{speed:.1f} {plural}/s", style="progress.data.speed")

    return Rate()


def report_problems(run: RunResult, verbose: bool, *, notes: bool = True) -> None:
    """One stderr line per file that failed and, with ``notes``, per warning, dropped fix
    and skipped file."""
    for warning in run.warnings if notes else []:
        echo_stderr(f"warning: {warning}")
    for result in run.files:
        for note in result.dropped if notes else []:
            echo_stderr(f"{result.path}: note: {note}")
        for cell in result.skipped_cells:
            echo_stderr(f"{result.path}:{cell}")
        if notes and result.skipped is not None and result.skipped != "generated":
            echo_stderr(f"{result.path}: skipped: {result.skipped}")
        if result.error is None:
            continue
        hint = ""
        if result.traceback is not None and not verbose:
            hint = " (run with --verbose for the traceback)"
        echo_stderr(f"{result.path}: {result.error}{hint}")
        if result.traceback is not None and verbose:
            echo_stderr(result.traceback.rstrip())


def _cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on every platform
        return os.cpu_count() or 1


def errors_sentence(errors: int, skipped_cells: int = 0) -> str:
    text = f" {count_of(errors, 'file')} could not be processed." if errors else ""
    if skipped_cells:
        text += f" {count_of(skipped_cells, 'notebook cell')} could not be parsed (skipped)."
    return text


def nothing_checked(run: RunResult) -> str | None:
    """The one line that replaces the summary when not one file could be checked: each
    was too large or could not be processed (unreadable, binary, undecodable, a syntax
    error). The run then exits 2: nothing passed, nothing was looked at. None when a file
    was checked, or when the files were left out on purpose (``exclude``, ``@generated``:
    pre-commit names excluded files, and passing them is what the user asked for)."""
    from gradfix.runner import skipped_on_purpose

    if not run.files or any(
        (result.error is None and result.skipped is None) or result.findings for result in run.files
    ):
        return None
    too_large = sum(
        1
        for result in run.files
        if result.error is None
        and result.skipped is not None
        and not skipped_on_purpose(result.skipped)
    )
    errors = len(run.errors)
    if not too_large and not errors:
        return None
    parts = []
    if errors:
        parts.append(f"{count_of(errors, 'file')} could not be processed")
    if too_large:
        parts.append(f"{count_of(too_large, 'file')} larger than max-file-size")
    return f"Nothing was checked: {', '.join(parts)}."


def count_skipped_cells(run: RunResult) -> int:
    return sum(len(result.skipped_cells) for result in run.files)


def count_of(number: int, noun: str) -> str:
    plural = "es" if noun.endswith(("x", "s")) else "s"
    return f"{number} {noun}{'' if number == 1 else plural}"


def echo_stderr(message: str) -> None:
    typer.echo(message, err=True)
