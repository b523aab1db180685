"""``gradfix trace``: find autograd bugs by running the program once.

The program runs in a child process (:mod:`.launch`) where :mod:`.hook` starts a
:class:`~gradfix.trace.tracer.Tracer` as soon as torch is imported. The tracer watches
torch (a ``TorchFunctionMode``, node metadata and hooks, verify's leaf and backward
instrumentation) and pins each autograd error, nan gradient or cut graph to the user's line
and to the rule whose fix applies. Findings come back to the parent as JSON lines through a
temporary directory. Importing this package does not import torch.

    from gradfix.trace import run_trace
    result = run_trace(["python", "train.py"], timeout=600, max_steps=20)
    for finding in result.findings:
        print(finding.path, finding.line, finding.code, finding.message)
"""

from __future__ import annotations

from gradfix.trace.launch import LaunchError, RuntimeFinding, TraceResult, entry_command, run_trace

__all__ = ["LaunchError", "RuntimeFinding", "TraceResult", "entry_command", "run_trace"]
