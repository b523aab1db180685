"""Inside a process started by ``gradfix trace``: start the tracer when torch is imported.

Loaded by the ``sitecustomize`` that :mod:`gradfix.trace.launch` puts first on
``PYTHONPATH``, so every Python process of the traced command (DataLoader workers started
with ``spawn``, a ``pytest`` run, subprocesses) is traced; a process that never imports
torch pays nothing. Findings are appended, one JSON object a line, to
``$GRADFIX_RUNTRACE_DIR/trace-<pid>.jsonl`` as they are made; the last line of a process
that ends normally (or is stopped by ``--max-steps`` or the parent's timeout) is an
``{"event": "end", ...}`` record. Never raises into the user's program.
"""

from __future__ import annotations

import atexit
import importlib.abc
import importlib.util
import json
import os
import signal
import sys
import warnings
from collections.abc import Callable
from types import ModuleType, TracebackType
from typing import Any

DIR_VARIABLE = "GRADFIX_RUNTRACE_DIR"
CONFIG_VARIABLE = "GRADFIX_RUNTRACE_CONFIG"


class _AfterImport(importlib.abc.MetaPathFinder):
    """Calls ``callback`` once the module ``name`` has been executed (imported)."""

    def __init__(self, name: str, callback: Callable[[], None]) -> None:
        self.name = name
        self.callback = callback

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        execute = loader.exec_module
        callback = self.callback

        def execute_then_call(module: ModuleType) -> None:
            execute(module)
            callback()

        loader.exec_module = execute_then_call  # type: ignore[method-assign]
        return spec


def start() -> None:
    """Install the tracer now if torch is loaded, else right after ``import torch``."""
    if "torch" in sys.modules:
        _start_guarded()
    else:
        sys.meta_path.insert(0, _AfterImport("torch", _start_guarded))


def _start_guarded() -> None:
    try:
        _start_tracer()
    except Exception as error:  # noqa: BLE001 - tracing lost, the program runs on
        _write({"event": "note", "message": f"trace not started: {type(error).__name__}: {error}"})


def _start_tracer() -> None:
    from gradfix.trace.tracer import (
        TraceMode,
        Tracer,
        untraced_optimizer_steps,
        watch_inplace_flags,
    )
    from gradfix.verify import instrument

    config = json.loads(os.environ.get(CONFIG_VARIABLE) or "{}")
    instrument.install()
    tracer: Tracer = Tracer(
        _write,
        singular=frozenset(config.get("singular", ())),
        max_steps=config.get("max_steps"),
        on_stop=lambda reason: _stop(tracer, reason),
    )
    instrument.activate(tracer.recorder)
    mode = TraceMode(tracer)
    mode.__enter__()  # on for the rest of the process
    untraced_optimizer_steps(mode)
    watch_inplace_flags(tracer)
    state: dict[str, Any] = {"outcome": {"status": "ok"}}
    _chain_excepthook(tracer, state)
    _warnings_at_user_lines(tracer.frames)
    atexit.register(_end, tracer, state)
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, lambda *_: _stop(tracer, "timeout", exit_code=143))


def _chain_excepthook(tracer: Any, state: dict[str, Any]) -> None:
    """Note the program's uncaught error (and pin it, if the tracer did not see it raise);
    then the program's own hook prints it as always."""
    previous = sys.excepthook

    def note(kind: type[BaseException], error: BaseException, tb: Any) -> None:
        try:
            state["outcome"] = {"status": "error", "type": kind.__name__, "message": str(error)}
            _report_uncaught(tracer, error, tb)
            tb = _without_gradfix_frames(tb, tracer.frames)
            error.with_traceback(tb)  # what the default hook prints
        except Exception:  # noqa: BLE001 - the program's error is printed below regardless
            pass
        previous(kind, error, tb)

    sys.excepthook = note


def _without_gradfix_frames(tb: TracebackType | None, frames: Any) -> TracebackType | None:
    """The traceback as the program alone would have it: without the tracer's frames."""
    kept = []
    while tb is not None:
        if not frames.is_gradfix_file(tb.tb_frame.f_code.co_filename):
            kept.append(tb)
        tb = tb.tb_next
    rebuilt = None
    for entry in reversed(kept):
        rebuilt = TracebackType(rebuilt, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    return rebuilt


def _warnings_at_user_lines(frames: Any) -> None:
    """A warning torch raises inside a traced op names the tracer's line (the innermost
    Python frame); show it at the user's line, as without the tracer."""
    show = warnings.showwarning

    def show_at_user_line(
        message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None
    ) -> None:
        if frames.is_gradfix_file(filename):
            site = frames.site()
            if site is not None:
                filename, lineno, line = site[0], site[1], None
        show(message, category, filename, lineno, file, line)

    warnings.showwarning = show_at_user_line


def _report_uncaught(tracer: Any, error: BaseException, tb: Any) -> None:
    from gradfix.trace import errors
    from gradfix.verify.instrument import one_line  # torch is loaded: the tracer runs

    kind = errors.kind_of(str(error))
    if kind is None or getattr(error, "gradfix_reported", False):
        return
    site = tracer.frames.traceback_site(tb)
    tracer.report_error(error, kind, errors.CODES[kind], site, one_line(error) or kind)


def _end(tracer: Any, state: dict[str, Any], status: str | None = None) -> None:
    try:
        tracer.busy = False
        tracer.untraced(tracer.finish)
    finally:
        outcome = dict(state["outcome"], status=status) if status else state["outcome"]
        _write({"event": "end", "outcome": outcome, "steps": tracer.steps, "notes": tracer.notes})


def _stop(tracer: Any, reason: str, exit_code: int = 0) -> None:
    """End the process now (``--max-steps`` reached, or the parent's timeout): the
    findings so far and the end record are written, the program's output flushed."""
    _end(tracer, {"outcome": {}}, reason)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001, S110 - a closed stream: nothing to flush
            pass
    os._exit(exit_code)


def _write(record: dict[str, Any]) -> None:
    directory = os.environ.get(DIR_VARIABLE)
    if not directory:
        return
    record = dict(record, pid=os.getpid())
    try:
        with open(
            os.path.join(directory, f"trace-{os.getpid()}.jsonl"), "a", encoding="utf-8"
        ) as out:
            out.write(json.dumps(record, default=str) + "\n")
    except OSError:
        pass
