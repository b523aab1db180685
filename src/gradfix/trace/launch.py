"""The parent side of ``gradfix trace``: run the program once, traced, and read the findings.

The command runs in a child process with its own stdin, stdout and stderr (or stdout sent
to stderr, for machine-readable reports), in the current directory, with a
``sitecustomize`` first on ``PYTHONPATH`` that starts :mod:`gradfix.trace.hook` in every
Python process. Next to that ``sitecustomize`` sits a link to this ``gradfix`` package, so
any interpreter with torch can load the hook (torch comes from the program's own
environment). Findings come back through ``trace-<pid>.jsonl`` files in a temporary
directory that is removed afterwards; nothing is written into the project.

The program runs in a session of its own (a process group gradfix can signal as one): at
the time limit (:data:`DEFAULT_TIMEOUT` unless told otherwise) and on Ctrl-C the whole
group is stopped, and what the program left running when it ended (a ``sleep 600`` that
holds the output pipe open) is stopped with it, so the run ends when the program does.

    result = run_trace(["python", "train.py"], timeout=600, max_steps=20)
    result.findings, result.exit_code, result.status
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from gradfix.trace.hook import CONFIG_VARIABLE, DIR_VARIABLE

SITECUSTOMIZE = '''"""gradfix: traces autograd in this process for ``gradfix trace``."""
import os

if os.environ.get("GRADFIX_RUNTRACE_DIR"):
    try:
        from gradfix.trace.hook import start
    except Exception:  # gradfix cannot load in this interpreter: the program runs untraced
        pass
    else:
        start()
'''
#: Seconds between asking a timed-out program to stop (SIGTERM) and killing it.
GRACE_SECONDS = 5.0
#: Seconds a traced run may take unless told otherwise (``gradfix trace --timeout``; 0 or
#: None: no limit): a trace is for finding bugs in the first steps, not for training.
DEFAULT_TIMEOUT = 3600.0
#: POSIX: the program in a session (and process group) of its own, stopped as one
OWN_GROUP = hasattr(os, "killpg")
PACKAGE_DIR = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class RuntimeFinding:
    """One finding of a run: the rule whose fix applies, the user's line, the evidence."""

    code: str
    kind: str
    path: str
    line: int
    message: str
    step: int
    evidence: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> RuntimeFinding:
        return cls(
            code=str(record["code"]),
            kind=str(record["kind"]),
            path=str(record["path"]),
            line=int(record["line"]),
            message=str(record["message"]),
            step=int(record.get("step", 0)),
            evidence=dict(record.get("evidence") or {}),
        )


@dataclass
class TraceResult:
    """What one traced run gave: its findings and how the program ended.

    ``status``: ``ok`` (exit status 0), ``error`` (another exit status), ``timeout``,
    ``max-steps`` (stopped after the N-th backward call) or ``not-started``."""

    findings: list[RuntimeFinding]
    status: str
    exit_code: int | None
    steps: int = 0
    notes: list[str] = field(default_factory=list)
    error: str | None = None  # the program's uncaught error, one line


class LaunchError(Exception):
    """The command could not be started (one line for the user)."""


def run_trace(
    command: list[str],
    *,
    timeout: float | None = DEFAULT_TIMEOUT,
    max_steps: int | None = None,
    stdout: IO[Any] | int | None = None,
    cwd: str | None = None,
) -> TraceResult:
    """Run ``command`` once under the tracer and collect what it found; ``timeout``:
    seconds before the program and all it started are stopped (None or 0: no limit)."""
    home = tempfile.mkdtemp(prefix="gradfix-trace-")
    try:
        hook_dir = _hook_dir(home)
        results = os.path.join(home, "results")
        os.mkdir(results)
        env = _environment(hook_dir, results, max_steps)
        exit_code, timed_out, pid = _run(command, env, timeout, stdout, cwd)
        return _collect(Path(results), pid, exit_code, timed_out)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def entry_command(entry: str) -> list[str]:
    """The command that imports ``module`` of ``module:function`` and calls ``function()``."""
    return [sys.executable, "-m", "gradfix.trace.entry", entry]


def _hook_dir(home: str) -> str:
    hook_dir = os.path.join(home, "hook")
    os.mkdir(hook_dir)
    Path(hook_dir, "sitecustomize.py").write_text(SITECUSTOMIZE, encoding="utf-8")
    os.symlink(PACKAGE_DIR, os.path.join(hook_dir, "gradfix"), target_is_directory=True)
    return hook_dir


#: Ops whose result overflows to inf for finite inputs: a branch ``torch.where`` discards
#: still sends ``0 * inf = nan`` back through their backward (watched like singular ops).
OVERFLOWING = frozenset({"exp", "exp2", "expm1", "cosh", "sinh", "__rpow__"})


def _environment(hook_dir: str, results: str, max_steps: int | None) -> dict[str, str]:
    from gradfix.unsafe_branch import singular_function_names

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (hook_dir, env.get("PYTHONPATH", "")) if p)
    watched = singular_function_names() | OVERFLOWING
    config = {"max_steps": max_steps, "singular": sorted(watched)}
    env[DIR_VARIABLE] = results
    env[CONFIG_VARIABLE] = json.dumps(config)
    return env


def _run(
    command: list[str],
    env: dict[str, str],
    timeout: float | None,
    stdout: IO[Any] | int | None,
    cwd: str | None,
) -> tuple[int | None, bool, int]:
    try:
        process = subprocess.Popen(
            command, env=env, stdout=stdout, cwd=cwd, start_new_session=OWN_GROUP
        )
    except OSError as error:
        raise LaunchError(f"cannot run {command[0]!r}: {error.strerror or error}") from None
    try:
        exit_code = process.wait(timeout=timeout or None)
    except subprocess.TimeoutExpired:
        _stop(process)
        return None, True, process.pid
    except KeyboardInterrupt:
        _interrupt(process)
        raise
    _stop_group(process.pid)  # what the program left running ends with it
    return exit_code, False, process.pid


def _interrupt(process: subprocess.Popen[Any]) -> None:
    """Ctrl-C reaches gradfix only (the program has a session of its own): pass it on
    and give the program :data:`GRACE_SECONDS` to end on it (its ``except
    KeyboardInterrupt`` runs), then :func:`_stop`; a second Ctrl-C skips the wait."""
    _signal(process, signal.SIGINT)
    try:
        process.wait(timeout=GRACE_SECONDS)
    except (subprocess.TimeoutExpired, KeyboardInterrupt):
        pass
    _stop(process)


def _stop(process: subprocess.Popen[Any]) -> None:
    """SIGTERM (the hook writes what it found and exits) to the program and all it
    started, then SIGKILL to whatever hangs on."""
    _signal(process, signal.SIGTERM)
    try:
        process.wait(timeout=GRACE_SECONDS)
    except subprocess.TimeoutExpired:
        _signal(process, signal.SIGKILL)
        process.wait()
    _stop_group(process.pid)


def _signal(process: subprocess.Popen[Any], number: int) -> None:
    if not OWN_GROUP:
        process.send_signal(number)
        return
    try:
        os.killpg(process.pid, number)
    except (ProcessLookupError, PermissionError):
        process.send_signal(number)  # the group is gone; the program may not be reaped yet


def _stop_group(group: int) -> None:
    """Stop what is left of the program's process group (the program itself ended):
    SIGTERM, then SIGKILL after :data:`GRACE_SECONDS`."""
    if not OWN_GROUP or not _group_alive(group):
        return
    os.killpg(group, signal.SIGTERM)
    deadline = time.monotonic() + GRACE_SECONDS
    while _group_alive(group) and time.monotonic() < deadline:
        time.sleep(0.05)
    if _group_alive(group):
        os.killpg(group, signal.SIGKILL)


def _group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _collect(results: Path, pid: int, exit_code: int | None, timed_out: bool) -> TraceResult:
    findings: list[RuntimeFinding] = []
    end: dict[str, Any] | None = None
    notes: list[str] = []
    for path in sorted(results.glob("trace-*.jsonl")):
        for record in _records(path):
            event = record.get("event")
            if event is None:
                findings.append(RuntimeFinding.from_record(record))
            elif event == "end" and record.get("pid") == pid:
                end = record
            elif event == "note":
                notes.append(str(record.get("message")))
    if end is not None:
        notes += [str(n) for n in end.get("notes", [])]
    status = _status(end, exit_code, timed_out)
    outcome = (end or {}).get("outcome", {})
    error = f"{outcome['type']}: {outcome['message']}" if outcome.get("type") else None
    return TraceResult(
        findings=_unique(findings),
        status=status,
        exit_code=exit_code,
        steps=int((end or {}).get("steps", 0)),
        notes=notes,
        error=error.splitlines()[0] if error else None,
    )


def _records(path: Path) -> list[dict[str, Any]]:
    records = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            continue  # a line cut short by a kill
    return records


def _status(end: dict[str, Any] | None, exit_code: int | None, timed_out: bool) -> str:
    if timed_out:
        return "timeout"
    stopped = (end or {}).get("outcome", {}).get("status")
    if stopped == "max-steps":
        return "max-steps"
    return "ok" if exit_code == 0 else "error"


def _unique(findings: list[RuntimeFinding]) -> list[RuntimeFinding]:
    """One finding per (code, file, line), the first seen (workers repeat the parent's)."""
    seen: dict[tuple[str, str, int], RuntimeFinding] = {}
    for finding in findings:
        seen.setdefault((finding.code, finding.path, finding.line), finding)
    return sorted(seen.values(), key=lambda f: (f.path, f.line, f.code))
