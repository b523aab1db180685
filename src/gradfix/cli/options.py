"""The command-line options, each defined once (an ``Annotated`` alias) and shared by the
commands that take it: ``check`` and ``fix`` share their paths, rule selection, ``--config``,
``--stdin-filename``, ``-j``, ``--changed-since``, ``--no-cache``, ``--quiet`` and
``--verbose``; ``fix`` and ``verify`` their execution limits.

Typer reads the annotations at run time: ``Optional[X]``, not ``X | None`` (Python 3.9)."""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Annotated, Optional

import typer

if TYPE_CHECKING:
    pass


class CheckFormat(str, enum.Enum):
    text = "text"
    concise = "concise"
    json = "json"
    sarif = "sarif"
    github = "github"


class ExecutorKind(str, enum.Enum):
    local = "local"
    ray = "ray"


class VerifyFormat(str, enum.Enum):
    text = "text"
    json = "json"


class RulesFormat(str, enum.Enum):
    text = "text"
    json = "json"


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
ExecutorOption = Annotated[
    ExecutorKind,
    typer.Option(
        "--executor",
        help="Where files are linted and fixed: local (this machine's worker processes, "
        "--jobs) or ray (a Ray cluster: --ray-address or RAY_ADDRESS, else a Ray started "
        "for the run; needs `pip install 'gradfix[ray]'`). This process reads and writes "
        "every file either way.",
    ),
]
RayAddressOption = Annotated[
    Optional[str],
    typer.Option(
        "--ray-address",
        metavar="ADDRESS",
        help="The Ray cluster for --executor ray (default: RAY_ADDRESS, else a local Ray).",
        show_default=False,
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
        ".json, .md or .html by the suffix (the HTML draws each finding's path, leaf to "
        "loss, before and after its fix).",
        show_default=False,
    ),
]
TraceReportOption = Annotated[
    Optional[str],
    typer.Option(
        "--report",
        metavar="FILE.html",
        help="Also write an HTML report: each finding with a drawing of the path the run "
        "took to it (leaf to loss, one box per op and line) and of the fixed code's path.",
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
TraceVerifyCommandOption = Annotated[
    Optional[str],
    typer.Option(
        "--cmd",
        metavar="COMMAND",
        help="With --verify / --write: judge every fix by running this command (e.g. "
        '"pytest tests/x.py") instead of the traced program again, as `gradfix verify '
        "--cmd` does.",
        show_default=False,
    ),
]
TraceTimeoutOption = Annotated[
    Optional[float],
    typer.Option(
        "--timeout",
        min=0,
        help="Stop the program, and all it started, after this many seconds "
        "(default: 3600; 0: no limit).",
    ),
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
