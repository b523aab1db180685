"""The ``gradfix`` command line: ``check``, ``fix``, ``verify``, ``trace``, ``rules``, ``explain``,
``lsp``.

The commands parse options, call :mod:`gradfix.runner` / :mod:`gradfix.registry` and
format what they return. Output conventions (a public contract, see ``--help``):

- stdout carries the results (finding lines, JSON, diffs, fixed stdin source, summaries of
  ``check``); stderr carries one line per problem (``path: syntax error at line 3: ...``),
  notes, warnings and the summary of ``fix``.
- Exit status 2 means a file could not be processed or the command line is wrong; it beats
  the other codes. Never a traceback, unless ``--verbose``.

The engine and the codemods (LibCST) are imported inside the commands, so ``--help`` and
option errors are quick, and torch is never imported.

Layout: this module holds the typer ``app``, :func:`main` and :func:`run` (the installed
command: :func:`main`, then a quick end of the process); one module per command
(:mod:`.check`, :mod:`.fix`, :mod:`.verify`, :mod:`.trace`, :mod:`.rules` with ``explain``,
:mod:`.server` with ``lsp``); :mod:`.options` defines each option once for the commands
that share it; :mod:`.common` the helpers they share (configuration, running the engine,
stderr lines) and :mod:`.proving` the verification ``fix`` and ``verify`` share.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from typing import Annotated, NoReturn

import typer

from gradfix.cli.coercion import install as install_plain_coercion
from gradfix.cli.usage import install as install_one_line_usage_errors
from gradfix.lazy import defer_libcst

defer_libcst()  # before the commands import the engine: most runs build no fix
install_plain_coercion()  # typer's option checks without Pydantic for plain values
install_one_line_usage_errors()  # `error: unknown format 'xml' (choose from: ...)`

from gradfix.cli import check, fix, rules, server, trace, verify  # noqa: E402
from gradfix.cli.common import EXIT_ERROR, EXIT_INTERRUPTED, echo_stderr  # noqa: E402

app = typer.Typer(
    name="gradfix",
    help="Find, rewrite and verify PyTorch autograd pitfalls.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)

# registered in the order `--help` lists them
app.command()(check.check)
app.command()(fix.fix)
app.command()(verify.verify)
app.command(context_settings={"ignore_unknown_options": True})(trace.trace)
app.command()(rules.rules)
app.command()(rules.explain)
app.command()(server.lsp)


def run() -> NoReturn:
    """The ``gradfix`` command and ``python -m gradfix``: :func:`main`, then the process
    ends without tearing the interpreter down (as mypy's command does). Freeing a run's
    objects one by one (every module, the rules, the results) takes 40-70 ms at the end
    of each run, which the user only waits for: a fifth of a check of one file. What an
    exit must do still happens, in the interpreter's order: idle thread pools are stopped
    and other threads waited for, ``atexit`` handlers run (the verifier's server, worker
    pools, temporary directories), the output is flushed. :func:`main` raises
    ``SystemExit`` as before, for a program that calls it and goes on."""
    try:
        main()
    except SystemExit as exit_:
        _exit_now(exit_.code)
    _exit_now(0)


def _exit_now(code: object) -> NoReturn:
    if code is None or isinstance(code, int):
        status = code or 0
    else:  # what ``SystemExit("message")`` does
        echo_stderr(str(code))
        status = 1
    # what the interpreter runs as it ends: idle thread pools are stopped and the other
    # threads waited for (joining them directly hangs behind an idle pool), then atexit
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):  # a closed pipe (``gradfix check | head``): as before
        sys.exit(status)
    os._exit(status)


def main() -> None:
    """Run the command line in this process; ends with ``SystemExit`` (the ``gradfix``
    command is :func:`run`)."""
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
        echo_stderr(
            f"internal error: {type(error).__name__}: {_first_line(error)}"
            " (run with --verbose for the traceback)"
        )
        sys.exit(EXIT_ERROR)


def _interrupted() -> NoReturn:
    """Ctrl-C: one line and exit 130 (128 + SIGINT, the shell's convention). Writes are
    atomic, so every file is either complete (fixed) or as it was; a command that writes
    nothing says that nothing was changed."""
    echo_stderr(f"gradfix: interrupted; {_what_was_written(sys.argv[1:])}")
    sys.exit(EXIT_INTERRUPTED)


def _what_was_written(arguments: list[str]) -> str:
    """What an interrupted run leaves on disk, from its command line: ``fix --write`` /
    ``--interactive`` and ``trace --write`` fix files, ``check --add-noqa`` comments
    them, the rest (``check``, a ``fix`` preview, ``verify``...) writes nothing."""
    options = arguments[: arguments.index("--")] if "--" in arguments else arguments
    command = next((argument for argument in options if not argument.startswith("-")), "")
    flags = set(options)
    for short in (a for a in options if len(a) > 1 and a[0] == "-" and a[1] != "-"):
        flags |= {f"-{letter}" for letter in short[1:]}  # -qw: -q -w
    fixing = command in ("fix", "trace") and bool(flags & {"--write", "-w"})
    if fixing or (command == "fix" and bool(flags & {"--interactive", "-i"})):
        return "files already fixed are complete, the others unchanged"
    if command == "check" and "--add-noqa" in flags:
        return "files already given their noqa comments are complete, the others unchanged"
    return "no file was changed"


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


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else ""


if __name__ == "__main__":  # pragma: no cover
    main()
