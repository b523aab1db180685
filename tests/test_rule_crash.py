"""No input crashes a run: a rule that raises on a file is one line naming the file and
the rule (exit 2, the traceback with --verbose); the other files and the other rules'
findings on that file go on. In process and in worker processes, for check, fix and the
language server."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
from crashing_rule import Crashes
from typer.testing import CliRunner

import gradfix.registry
import gradfix.runner
from gradfix.cli import app
from gradfix.codemods.tensor_from_tensors import TensorFromTensors
from gradfix.engine import lint_source
from gradfix.lsp import BufferLint, ClientText

BUGGY = "import torch\na = torch.nn.Parameter(torch.rand(2))\nA = torch.tensor([a[0], a[1]])\n"
FIXED = BUGGY.replace("torch.tensor([a[0], a[1]])", "torch.stack([a[0], a[1]])")
CRASHING = BUGGY + "# crash\n"
LINE = (
    "internal error in GF903 (crashes): RecursionError: maximum recursion depth exceeded"
    " in process {pid}; please report (run with --verbose for the traceback)"
)


def invoke(*args: str):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(app, list(args), catch_exceptions=False)


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(gradfix.registry, "all_rules", lambda: [TensorFromTensors, Crashes])
    return tmp_path


def test_the_engine_keeps_the_other_rules_findings_and_fixes() -> None:
    result = lint_source(CRASHING, rules=[TensorFromTensors, Crashes], fix=True)
    assert [f.code for f in result.findings] == ["GF101"]
    assert result.source == FIXED + "# crash\n"
    [crash] = result.crashes  # once, though the rule ran on every pass
    assert crash.line() == LINE.format(pid=os.getpid()).split(" (run with")[0]
    assert "in visit_Call" in crash.traceback


def test_check_reports_the_crash_on_one_line_and_goes_on(project: Path) -> None:
    (project / "a.py").write_text(CRASHING)
    (project / "b.py").write_text(BUGGY)
    result = invoke("check", "--format", "concise", ".")
    assert result.exit_code == 2
    assert result.stderr == f"a.py: {LINE.format(pid=os.getpid())}\n"
    assert [line.split(" ")[:2] for line in result.stdout.splitlines()] == [
        ["a.py:3:5:", "GF101"],  # the other rule on the same file
        ["b.py:3:5:", "GF101"],
    ]
    verbose = invoke("check", "--verbose", ".")
    assert "Traceback (most recent call last)" in verbose.stderr
    assert "raise RecursionError" in verbose.stderr


def test_fix_writes_the_other_files_and_leaves_the_crashed_one(project: Path) -> None:
    (project / "a.py").write_text(CRASHING)
    (project / "b.py").write_text(BUGGY)
    result = invoke("fix", "--write", "--no-verify", ".")
    assert result.exit_code == 2
    assert result.stderr.splitlines()[0] == f"a.py: {LINE.format(pid=os.getpid())}"
    assert (project / "a.py").read_text() == CRASHING  # a rule failed: not written
    assert (project / "b.py").read_text() == FIXED


def test_worker_processes_report_crashes_the_same_way(project: Path) -> None:
    count = 2 * gradfix.runner.MIN_FILES_PER_WORKER
    for index in range(count):
        (project / f"m{index:02}.py").write_text(CRASHING if index % 2 else BUGGY)
    result = invoke("check", "--format", "concise", "-j", "2", ".")
    assert result.exit_code == 2
    lines = result.stderr.splitlines()
    assert len(lines) == count // 2
    pids = set()
    for index, line in zip(range(1, count, 2), lines):
        path, _, rest = line.partition(": ")
        assert path == f"m{index:02}.py"
        pid = int(rest.split("in process ")[1].split(";")[0])
        assert rest == LINE.format(pid=pid)
        pids.add(pid)
    assert os.getpid() not in pids  # the workers ran the rule
    assert len(result.stdout.splitlines()) == count  # every file's GF101
    written = invoke("fix", "--write", "--no-verify", "-j", "2", ".")
    assert written.exit_code == 2 and len(written.stderr.splitlines()) == count // 2 + 1
    texts = [(project / f"m{index:02}.py").read_text() for index in range(count)]
    assert texts == [CRASHING if index % 2 else FIXED for index in range(count)]


def test_the_language_server_keeps_the_other_rules_findings(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.ERROR):
        lint = BufferLint.of(
            "file:///t.py", ClientText(CRASHING), "t.py", [TensorFromTensors, Crashes]
        )
    assert [f.code for f in lint.findings] == ["GF101"]
    assert lint.fixed_safe() == FIXED + "# crash\n"
    assert [s.description for s in lint.singles()] != []
    assert "t.py: internal error in GF903 (crashes): RecursionError" in caplog.text
