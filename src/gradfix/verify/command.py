"""``gradfix verify --cmd "pytest tests/test_model.py"``: the user's own command as harness.

The command runs twice with the gradient recorder installed in every Python process it
starts (a ``sitecustomize`` put first on ``PYTHONPATH``): once in the project as it is
(BEFORE, recorded once and reused for every fix) and once in a temporary copy of the
project with the fixed file written into the copy (AFTER). Each Python process writes its
trace (leaves, backward calls with their roots and leaf gradients, outcome) at exit; the
traces of a run are joined in process start order and compared by the oracle
(:func:`gradfix.verify.compare_traces`). The user's files are never written by gradfix;
the command itself runs in the project directory for BEFORE, as the user would run it.

No finite differences are possible here (the oracle cannot re-run part of an arbitrary
command), so a fix whose reference gradient is missing in BEFORE (its backward raised)
is ``unverified`` under ``--cmd``, and so is one whose gradient differs from BEFORE's where
only finite differences could tell which is true (GF103's fix moves a leaf past a scale);
the script harness and the probes estimate them.

    harness = CommandHarness("pytest -q tests/test_model.py", root=".")
    verdict = harness.prove("src/model.py", fixed_source)
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any

from gradfix.verify.oracle import Verdict, compare_traces
from gradfix.verify.process import PACKAGE_ROOT

#: What is not copied into the patched tree (caches, environments, VCS data).
IGNORED = (
    "*.pyc",
    "__pycache__",
    ".git",
    ".hg",
    ".venv",
    "venv",
    ".tox",
    ".nox",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
    ".gradfix_cache",
    "*.egg-info",
    "node_modules",
    "build",
    "dist",
)
HOOK = '''"""gradfix: records gradients of this process for ``gradfix verify --cmd``."""
import os
import sys


def _gradfix_start():
    try:
        import torch  # noqa: F401 - the program's own torch, before gradfix is on the path
    except Exception:  # no torch in this interpreter: record nothing
        return
    # The recorder of the gradfix that runs the harness, whatever the command's Python has.
    sys.path.insert(0, {package_root!r})
    try:
        from gradfix.verify.command_hook import start
    except Exception:
        return
    finally:
        sys.path.remove({package_root!r})
    start()


if os.environ.get("GRADFIX_TRACE_DIR"):
    _gradfix_start()
'''


class CommandHarness:
    """Runs one command before and after fixes; BEFORE's trace is computed once."""

    def __init__(
        self,
        command: str,
        *,
        root: str = ".",
        timeout: float = 60.0,
        seed: int = 0,
        max_steps: int | None = None,
    ) -> None:
        self.command = command
        self.max_steps = max_steps  # each Python process stops past this many backward calls
        self.root = os.path.abspath(root)
        self.timeout = timeout
        self.seed = seed
        self._before: dict[str, Any] | None = None
        self._lock = threading.Lock()
        self._home = tempfile.mkdtemp(prefix="gradfix-cmd-")
        Path(self._home, "hook").mkdir()
        hook = HOOK.format(package_root=PACKAGE_ROOT)
        Path(self._home, "hook", "sitecustomize.py").write_text(hook, encoding="utf-8")

    def close(self) -> None:
        shutil.rmtree(self._home, ignore_errors=True)

    def before(self) -> dict[str, Any]:
        with self._lock:
            if self._before is None:
                self._before = self._run(self.root, "before")
            return self._before

    def prove(self, path: str, fixed_source: str, others: dict[str, str] | None = None) -> Verdict:
        """Run the command in a copy of the project where ``path`` holds ``fixed_source``
        (and each of ``others``, path -> text, its text: the project's other fixes)."""
        target = os.path.abspath(path)
        if not self._inside(target):
            return Verdict("unverified", f"{path} is outside the project {self.root}")
        before = self.before()
        patched = {os.path.abspath(p): text for p, text in (others or {}).items()}
        patched = {p: text for p, text in patched.items() if self._inside(p)}
        patched[target] = fixed_source
        with tempfile.TemporaryDirectory(dir=self._home) as copy:
            tree = os.path.join(copy, "tree")
            shutil.copytree(self.root, tree, ignore=shutil.ignore_patterns(*IGNORED), symlinks=True)
            for file, text in patched.items():
                Path(tree, os.path.relpath(file, self.root)).write_text(text, encoding="utf-8")
            after = self._run(tree, "after")
        verdict = compare_traces(before, after, None, estimable=False)
        verdict.evidence["command"] = self.command
        return verdict

    def _inside(self, path: str) -> bool:
        return os.path.commonpath([path, self.root]) == self.root

    def _run(self, cwd: str, label: str) -> dict[str, Any]:
        traces = tempfile.mkdtemp(prefix=f"{label}-", dir=self._home)
        env = dict(os.environ)
        hook = os.path.join(self._home, "hook")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (hook, cwd, env.get("PYTHONPATH", "")) if p)
        env.update(
            GRADFIX_TRACE_DIR=traces,
            GRADFIX_SEED=str(self.seed),
            CUDA_VISIBLE_DEVICES="",
            PYTHONHASHSEED=str(self.seed),
            GRADFIX_MAX_STEPS=str(self.max_steps or 0),
        )
        try:
            completed = subprocess.run(
                shlex.split(self.command),
                cwd=cwd,
                env=env,
                capture_output=True,
                timeout=self.timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return _failed("timeout", f"timeout after {self.timeout:g} s")
        except OSError as error:
            return _failed("env", f"cannot run {self.command!r}: {error.strerror}")
        trace = join_traces(sorted(Path(traces).glob("trace-*.json")))
        if completed.returncode != 0 and trace["outcome"].get("status") == "ok":
            tail = completed.stdout.decode(errors="replace").strip().splitlines()[-1:] or [""]
            trace["outcome"] = _command_failed(
                "code", f"exit status {completed.returncode}: {tail[0]}"
            )
        return trace


def join_traces(files: list[Path]) -> dict[str, Any]:
    """The traces of all processes of one run, in start order, as one trace."""
    parts = [json.loads(f.read_text(encoding="utf-8")) for f in files]
    parts.sort(key=lambda t: t.get("started", 0.0))
    joined = _empty_trace()
    for part in parts:
        offset = len(joined["leaves"])
        joined["leaves"].extend(part["leaves"])
        for event in part["events"]:
            event = dict(event, index=joined["event_count"] + event["index"])
            event["grads"] = {str(int(k) + offset): v for k, v in event.get("grads", {}).items()}
            joined["events"].append(event)
        joined["event_count"] += part["event_count"]
        joined["events_truncated"] |= part["events_truncated"]
        if part["outcome"].get("status") != "ok" and joined["outcome"]["status"] == "ok":
            joined["outcome"] = part["outcome"]
    return joined


def _empty_trace() -> dict[str, Any]:
    """A trace with no leaf and no backward call (the oracle's trace format)."""
    return {
        "outcome": {"status": "ok"},
        "leaves": [],
        "events": [],
        "event_count": 0,
        "events_truncated": False,
        "globals": {},
        "leaf_globals": [],
        "seed": 0,
    }


def _command_failed(category: str, message: str) -> dict[str, Any]:
    return {
        "status": "error",
        "type": "CommandFailed",
        "message": message,
        "line": None,
        "category": category,
    }


def _failed(category: str, message: str) -> dict[str, Any]:
    return {**_empty_trace(), "outcome": _command_failed(category, message)}
