"""Inside a process started by ``gradfix verify --cmd``: record gradients, dump at exit.

Loaded by the ``sitecustomize`` that :mod:`gradfix.verify.command` puts first on
``PYTHONPATH``. Seeds torch, ``random`` and NumPy, installs the instrumentation of
:mod:`gradfix.verify.instrument` with one recorder for the whole process, notes an
uncaught exception, and writes ``trace-<pid>.json`` into ``$GRADFIX_TRACE_DIR`` at exit,
or at the backward call past ``$GRADFIX_MAX_STEPS``, where it ends the process.
Never raises into the user's program: a failure here only loses the trace.
"""

from __future__ import annotations

import atexit
import json
import os
import random
import sys
import time
from typing import Any


def start() -> None:
    directory = os.environ["GRADFIX_TRACE_DIR"]
    seed = int(os.environ.get("GRADFIX_SEED", "0"))
    try:
        import torch

        from gradfix.verify import instrument
        from gradfix.verify.runner import failing_place
    except ImportError:
        return
    torch.manual_seed(seed)
    random.seed(seed)
    instrument.install()
    recorder = instrument.Recorder(filename="")
    instrument.activate(recorder)
    state: dict[str, Any] = {"outcome": {"status": "ok"}, "started": time.time()}
    previous_hook = sys.excepthook

    def note_exception(kind: type[BaseException], exc: BaseException, tb: Any) -> None:
        state["outcome"] = {
            "status": "error",
            "type": kind.__name__,
            "message": instrument.one_line(exc),
            "line": None,
            "category": "code",
            **failing_place(tb),  # where both versions may fail the same way
        }
        previous_hook(kind, exc, tb)

    sys.excepthook = note_exception
    atexit.register(_dump, directory, recorder, state, seed)
    max_steps = int(os.environ.get("GRADFIX_MAX_STEPS") or 0)
    if max_steps:
        recorder.max_events = max_steps

        def stop() -> None:
            # The process ends at once (a test runner would catch an exception and carry
            # on): both versions stop after the same number of backward calls.
            state["outcome"] = {"status": "stopped", "max_steps": max_steps}
            _dump(directory, recorder, state, seed)
            os._exit(0)

        recorder.on_max_steps = stop


def _dump(directory: str, recorder: Any, state: dict[str, Any], seed: int) -> None:
    if not recorder.leaves and not recorder.events:
        return  # a process that never touched autograd (pip, a shell helper...)
    trace = {
        "outcome": state["outcome"],
        "leaves": recorder.leaf_info,
        "events": recorder.events,
        "event_count": recorder.event_count,
        "events_truncated": recorder.event_count > len(recorder.events),
        "globals": {},
        "leaf_globals": [],
        "seed": seed,
        "started": state["started"],
    }
    path = os.path.join(directory, f"trace-{os.getpid()}.json")
    try:
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(trace, handle)
    except OSError:
        pass
