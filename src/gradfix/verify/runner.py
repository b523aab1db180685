"""Runner side of the oracle: ``python -m gradfix.verify.runner``.

Three entry points (see :mod:`gradfix.verify.process` for the parent side):

* ``--fork-server``: import torch once, then read one JSON *spec* per line on stdin and fork
  a runner for each, answering ``{"pid": ...}`` on stdout. Forked runners are reaped
  automatically; end of input stops the server.
* ``--child SPEC``: the same runner as a fresh process (no fork server).
* a runner (:func:`serve`): new session, working directory and output files from the spec,
  memory cap (``RLIMIT_AS``, set here rather than in a ``preexec_fn``: same effect, and
  ``preexec_fn`` is unsafe when the parent verifies from several threads), then it connects
  to the parent's Unix socket and answers JSON-line requests until ``{"mode": "exit"}``:

  - ``trace``: execute the script once with instrumentation (:mod:`.instrument`) and return
    its leaves, backward events, final outcome and module-level tensors;
  - ``fd``: finite differences of the script's backward roots (:mod:`.finite_diff`).

  Each request carries a ``timeout``; an alarm with the default action ends the process if
  the request runs past it, even inside a long C call.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import math
import os
import random
import re
import resource
import signal
import socket
import sys
import time
import types
from typing import Any

ENV_ERROR_TYPES = frozenset({
    "ModuleNotFoundError", "FileNotFoundError", "NotADirectoryError", "MemoryError",
    "ConnectionError", "ConnectionRefusedError", "URLError", "gaierror", "HTTPError",
    "GradfixProbeError",  # the probe found no input the code accepts: not the code's fault
})  # fmt: skip
ENV_MESSAGE = re.compile(
    r"CUDA|NVIDIA|cuda|not compiled with|MPS backend|can't allocate memory|"
    r"DefaultCPUAllocator",
    re.ASCII,
)


def main(argv: list[str]) -> int:
    if argv[:1] == ["--fork-server"]:
        return fork_server()
    if argv[:1] == ["--fork-daemon"] and len(argv) == 3:
        from gradfix.verify.daemon import fork_daemon

        return fork_daemon(argv[1], float(argv[2]))
    if argv[:1] == ["--child"] and len(argv) == 2:
        serve(json.loads(argv[1]), forked=False)
    print("usage: python -m gradfix.verify.runner (--fork-server | --child SPEC)", file=sys.stderr)
    return 2


def _import_torch() -> None:
    import torch  # noqa: F401 - the point of the server
    import torch._dynamo  # noqa: F401 - every optimizer's __init__ imports it (2 s)
    import torch.nn  # noqa: F401
    import torch.optim  # noqa: F401

    from gradfix.verify import finite_diff, instrument, sandbox  # noqa: F401


def fork_server() -> int:
    """Import torch once; fork a runner per spec line read on stdin."""
    _import_torch()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # reap forked runners automatically
    for line in iter(sys.stdin.readline, ""):
        spec = json.loads(line)
        pid = os.fork()
        if pid == 0:
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            serve(spec, forked=True)
        sys.stdout.write(json.dumps({"pid": pid}) + "\n")
        sys.stdout.flush()
    return 0


def serve(spec: dict[str, Any], *, forked: bool) -> None:
    """Run as the runner described by ``spec``; never returns."""
    code = 0
    try:
        if forked:
            os.setsid()
            _redirect_output(spec)
        if "env" in spec:  # forked by the shared server: the caller's environment
            os.environ.clear()
            os.environ.update(spec["env"])
        os.chdir(spec["cwd"])
        sys.path[0] = spec["cwd"]
        from gradfix.verify.sandbox import confine

        confine(spec)  # the OS sandbox where there is one, the audit-hook guard always
        _limit_memory(spec.get("memory_limit"))
        sys.stdin = open(os.devnull)  # noqa: SIM115 - the script must not read our input
        _answer_requests(spec["socket"])
    except BaseException:  # noqa: BLE001 - report on stderr, never return into the server
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _redirect_output(spec: dict[str, Any]) -> None:
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    for fd, path in ((1, spec["stdout"]), (2, spec["stderr"])):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(target, fd)
        os.close(target)
    os.close(null)


def _answer_requests(address: str) -> None:
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    connection.connect(address)
    reader = connection.makefile("rb")
    session: Session | None = None
    for line in reader:
        request = json.loads(line)
        if request.get("mode") == "exit":
            break
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        signal.alarm(int(math.ceil(float(request.get("timeout", 60.0)))) + 1)
        session = session or Session(request)
        result = session.handle(request)
        signal.alarm(0)
        connection.sendall(json.dumps(result, allow_nan=False).encode("utf-8") + b"\n")


def _limit_memory(limit: int | None) -> None:
    if not limit:
        return
    try:
        resource.setrlimit(resource.RLIMIT_AS, (int(limit), int(limit)))
    except (ValueError, OSError):
        pass  # a lower hard limit is already in place


def describe_exception(exc: BaseException, filename: str) -> dict[str, Any]:
    """One-line description of an exception that escaped the script."""
    from gradfix.verify.instrument import one_line

    name = type(exc).__name__
    message = one_line(exc)
    line = getattr(exc, "lineno", None) if isinstance(exc, SyntaxError) else None
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == filename:
            line = tb.tb_lineno
        tb = tb.tb_next
    where = failing_place(exc.__traceback__)
    env = name in ENV_ERROR_TYPES or (
        name in ("AssertionError", "RuntimeError", "AttributeError")
        and bool(ENV_MESSAGE.search(message))
    )
    return {
        "status": "error",
        "type": name,
        "message": message,
        "line": line,
        "category": "env" if env else "code",
        **where,
    }


def exit_place(exc: SystemExit, filename: str) -> dict[str, Any]:
    """Where a script ended early with ``sys.exit(0)`` (``exit()``, ``SystemExit``): the
    line of ``filename`` the exit was called from (``None`` when elsewhere), and
    ``where`` / ``code`` of the program's own innermost frame (:func:`failing_place`)."""
    line = None
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == filename:
            line = tb.tb_lineno
        tb = tb.tb_next
    return {"line": line, **failing_place(exc.__traceback__)}


def failing_place(tb: types.TracebackType | None) -> dict[str, Any]:
    """``where`` (``file:line``, relative to the working directory) and ``code`` (the
    line's text) of the innermost frame of the program itself, not of a library."""
    import linecache
    import sysconfig

    libraries = {sysconfig.get_path(k) for k in ("stdlib", "purelib", "platlib")}
    libraries.add(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # gradfix
    place: dict[str, Any] = {}
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if not filename.startswith(("<", *filter(None, libraries))):
            relative = os.path.relpath(filename) if os.path.isabs(filename) else filename
            text = linecache.getline(filename, tb.tb_lineno).strip()
            place = {"where": f"{relative}:{tb.tb_lineno}", "code": text}
        tb = tb.tb_next
    return place


def _deterministic_algorithms(torch: Any) -> None:
    """``torch.use_deterministic_algorithms(True, warn_only=True)`` without its import of
    ``torch._inductor.config`` (two seconds, pulls in dynamo); inductor's flag is set only
    when it is already loaded."""
    set_flag = getattr(torch._C, "_set_deterministic_algorithms", None)
    if set_flag is None:
        torch.use_deterministic_algorithms(True, warn_only=True)
        return
    set_flag(True, warn_only=True)
    inductor_config = sys.modules.get("torch._inductor.config")
    if inductor_config is not None:
        setattr(inductor_config, "deterministic", True)  # noqa: B010 - untyped module


class Session:
    """One script, executed as often as the requests need, in fresh namespaces."""

    def __init__(self, request: dict[str, Any]) -> None:
        import torch

        from gradfix.verify import instrument

        self.torch = torch
        self.instrument = instrument
        self.source: str = request["source"]
        self.path: str = request["path"]
        self.seed = int(request.get("seed", 0))
        if request.get("source_dir"):
            sys.path.append(request["source_dir"])
        _deterministic_algorithms(torch)
        self.default_dtype = torch.get_default_dtype()
        self.modules_before = set(sys.modules)
        self.project_dirs = [os.getcwd(), *filter(None, [request.get("source_dir")])]
        instrument.install()
        self.compile_error: dict[str, Any] | None = None
        self.hold: frozenset[int] = frozenset()
        self.hold_frozen: frozenset[int] = frozenset()
        self.dealias: frozenset[int] = frozenset()
        #: leaf -> values set at its first use in every later run (a synchronised replay)
        self.sync: dict[int, list[float]] = {}
        #: ``"k:g"`` -> values set at each group's first read (a replay that takes every
        #: write another run made to its leaves: see ``Recorder.sync_groups``)
        self.sync_groups: dict[str, list[float]] = {}
        self.code: types.CodeType | None = None
        try:
            self.code = compile(self.source, self.path, "exec")
        except SyntaxError as exc:
            self.compile_error = describe_exception(exc, self.path)

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        if request["mode"] == "trace":
            # a fix that makes more leaves train is replayed with them held (every later
            # run of this session too: the finite differences see the same program)
            self.hold = frozenset(int(k) for k in request.get("hold") or ())
            self.hold_frozen = frozenset(int(k) for k in request.get("hold_frozen") or ())
            # likewise a replay with the leaves' first values synchronised to another run's
            self.sync = {int(k): list(v) for k, v in (request.get("sync") or {}).items()}
            self.sync_groups = {
                str(k): list(v) for k, v in (request.get("sync_groups") or {}).items()
            }
            # a replay with the in-place writes at these lines made out of place (every
            # later run of this session too, as for ``hold``)
            if "dealias" in request:
                self.dealias = frozenset(int(n) for n in request.get("dealias") or ())
            return self.trace(
                request.get("max_steps"),
                grad_enabled=request.get("grad_enabled", True),
                skip_backward=bool(request.get("skip_backward")),
                record_first=bool(request.get("record_first_values")),
                record_groups=bool(request.get("record_group_values")),
                float64=bool(request.get("float64")),
            )
        if request["mode"] == "fd":
            from gradfix.verify.finite_diff import estimate

            return estimate(self, request)
        return {"error": f"unknown mode {request['mode']!r}"}

    def execute(
        self,
        recorder: Any,
        *,
        track_uses: bool = False,
        grad_enabled: bool = True,
        float64: bool = False,
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Run the script once under ``recorder``; return its outcome and namespace.
        ``float64``: in double precision with the same random values
        (:func:`~gradfix.verify.instrument.float64_run`)."""
        if self.code is None:
            return dict(self.compile_error or {}), {}
        self._reset_state()
        self.torch.set_grad_enabled(grad_enabled)
        module = types.ModuleType("__main__")
        module.__file__ = self.path
        module.__builtins__ = builtins  # type: ignore[attr-defined]
        saved_main, saved_argv = sys.modules.get("__main__"), sys.argv
        sys.modules["__main__"], sys.argv = module, [self.path]
        recorder.namespace = module.__dict__
        recorder.hold = self.hold
        recorder.hold_frozen = self.hold_frozen
        recorder.dealias = self.dealias
        recorder.sync = self.sync
        recorder.sync_groups = self.sync_groups
        self.instrument.activate(recorder)
        try:
            with contextlib.ExitStack() as stack:
                if track_uses:
                    stack.enter_context(self.instrument.UseTracker())
                if float64:
                    stack.enter_context(self.instrument.float64_run())
                exec(self.code, module.__dict__)
            outcome: dict[str, Any] = {"status": "ok"}
        except self.instrument.StopScript:
            outcome = {"status": "stopped"}
        except SystemExit as exc:
            outcome = (
                {"status": "ok", "exit": exit_place(exc, self.path)}
                if exc.code in (None, 0)
                else describe_exception(exc, self.path)
            )
        except Exception as exc:  # noqa: BLE001 - the script's failure is the data
            outcome = describe_exception(exc, self.path)
        finally:
            self.instrument.activate(None)
            sys.argv = saved_argv
            if saved_main is not None:
                sys.modules["__main__"] = saved_main
        return outcome, module.__dict__

    def _reset_state(self) -> None:
        self._forget_project_modules()
        torch = self.torch
        torch.set_default_dtype(self.default_dtype)
        torch.set_grad_enabled(True)
        torch.autograd.set_detect_anomaly(False)
        torch.manual_seed(self.seed)
        random.seed(self.seed)
        numpy = sys.modules.get("numpy")
        if numpy is not None:
            numpy.random.seed(self.seed)

    def _forget_project_modules(self) -> None:
        """Each execution imports the project's modules anew, as a fresh process would:
        a module-level leaf (``v = torch.randn(2, requires_grad=True)`` in a helper) is
        created again, from the same seed, where the finite differences perturb it."""
        for name in set(sys.modules) - self.modules_before:
            path = getattr(sys.modules[name], "__file__", None) or ""
            if any(path.startswith(directory + os.sep) for directory in self.project_dirs):
                del sys.modules[name]

    def trace(
        self,
        max_steps: int | None = None,
        *,
        grad_enabled: bool = True,
        skip_backward: bool = False,
        record_first: bool = False,
        record_groups: bool = False,
        float64: bool = False,
    ) -> dict[str, Any]:
        """One instrumented run; stopped at backward call ``max_steps + 1`` if any.
        ``grad_enabled=False``: the script starts with autograd off (the values it computes
        when nothing is recorded: the reference of a fix that only changes what autograd
        records, in a script without backward); ``skip_backward``: each backward call is
        recorded (its roots: the forward results) and not run."""
        started = time.monotonic()
        recorder = self.instrument.Recorder(self.path)
        recorder.max_events = max_steps or None
        recorder.skip_backward = skip_backward
        recorder.record_first_values = record_first
        recorder.record_group_values = record_groups
        outcome, namespace = self.execute(
            recorder,
            grad_enabled=grad_enabled,
            track_uses=record_first
            or record_groups
            or bool(self.sync)
            or bool(self.sync_groups)
            or bool(self.dealias),
            float64=float64,
        )
        if outcome["status"] == "stopped":
            outcome["max_steps"] = max_steps
        leaf_globals, tensors = self._module_tensors(namespace, recorder)
        return {
            "outcome": outcome,
            "leaves": recorder.leaf_info,
            "parameter_names": {str(k): name for k, name in recorder.parameter_names.items()},
            "events": recorder.events,
            "event_count": recorder.event_count,
            "events_truncated": recorder.event_count > len(recorder.events),
            "globals": tensors,
            "leaf_globals": leaf_globals,
            "global_leaf_index": {
                name: recorder.leaf_index(namespace[name]) for name in leaf_globals
            },
            "seed": self.seed,
            "custom_gradients": sorted(recorder.custom_gradients),
            "nonleaf_grad_reads": recorder.nonleaf_grad_reads,
            "grad_reads": {str(k): n for k, n in sorted(recorder.grad_reads.items())},
            "freezes": recorder.freezes,
            "module_freezes": recorder.module_freezes,
            "resteps": recorder.resteps,
            "optimized": sorted(recorder.optimized),
            "unfreezes": {code: len(ids) for code, ids in recorder.unfreezes.items()},
            "step_windows": {str(k): w for k, w in sorted(recorder.step_windows.items())},
            "step_lines": sorted(recorder.step_lines),
            "script": os.path.relpath(self.path) if os.path.isabs(self.path) else self.path,
            **({"held": sorted(self.hold), "held_steps": recorder.held_steps} if self.hold else {}),
            **({"held_while_frozen": sorted(self.hold_frozen)} if self.hold_frozen else {}),
            **({"dealiased": sorted(self.dealias)} if self.dealias else {}),
            **(
                {"first_values": {str(k): v for k, v in recorder.first_values.items()}}
                if record_first
                else {}
            ),
            **({"synced": sorted(self.sync)} if self.sync else {}),
            **(
                {
                    "group_values": recorder.group_values,
                    "group_values_truncated": recorder.group_values_truncated,
                }
                if record_groups
                else {}
            ),
            **({"sync_diverged": recorder.sync_diverged} if self.sync_groups else {}),
            "torch_version": self.torch.__version__,
            "duration_s": round(time.monotonic() - started, 3),
        }

    def _module_tensors(
        self, namespace: dict[str, Any], recorder: Any
    ) -> tuple[list[str], dict[str, Any]]:
        """Final module-level tensors (forward values), minus leaves and gradients."""
        torch = self.torch
        grads = {id(leaf.grad) for leaf in recorder.leaves if leaf.grad is not None}
        leaf_names, tensors = [], {}
        for name, value in list(namespace.items()):
            if name.startswith("__") or not isinstance(value, torch.Tensor):
                continue
            if recorder.leaf_index(value) is not None:
                leaf_names.append(name)
            elif id(value) not in grads:
                tensors[name] = self.instrument.encode_tensor(value)
        return leaf_names, tensors


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
