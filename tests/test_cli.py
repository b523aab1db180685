"""The command line (gradfix.cli): output formats, exit codes, stdin, writing files.

The sources use GF101 (tensor-from-tensors) and are written so that no other rule has
anything to say about them; commands that count findings also pass ``--select GF101``.
Bad input (files that cannot be parsed, decoded, read or written, newlines, BOM, tabs,
big files, symlink loops, Ctrl-C) is tested in test_bad_input.py.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import libcst as cst
import pytest
from typer.testing import CliRunner

import gradfix.registry
import gradfix.runner
from gradfix.cli import app
from gradfix.rule import Edit, FixSafety, Rule

SELECT = ["--select", "GF101"]
MESSAGE = "`torch.tensor()` of tensors cuts the autograd graph; use `torch.stack()`"

BUGGY = """import torch
a = torch.nn.Parameter(torch.rand(5))
a0 = a[0] * 2
a1 = torch.log(a[1] + 1)
A = torch.tensor([a0, a1])  # keep me
A.sum().backward()
"""
FIXED = BUGGY.replace("torch.tensor([a0, a1])", "torch.stack([a0, a1])")
CLEAN = "import torch\nx = torch.tensor([1.0, 2.0])\n"
UNSAFE = "import torch\na = torch.nn.Parameter(torch.rand(2))\nA = torch.tensor([a[0] * 2, 1.0])\n"
UNSAFE_FIXED = UNSAFE.replace(
    "torch.tensor([a[0] * 2, 1.0])", "torch.stack([a[0] * 2, torch.as_tensor(1.0)])"
)
NO_FIX = (
    "import torch\na = torch.nn.Parameter(torch.rand(2))\nA = torch.tensor([a[0] * 2, other])\n"
)
SYNTAX_ERROR = "import torch\nx = torch.tensor([1,\n"


def invoke(*args: str, input: bytes | str | None = None):  # noqa: A002 (click's name)
    return CliRunner().invoke(app, list(args), input=input, catch_exceptions=False)


def write(directory: Path, name: str, text: str | bytes) -> Path:
    path = directory / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty working directory: paths in the output are relative to it."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


# --- check ---------------------------------------------------------------------------------


def test_check_clean_file_exits_0(project: Path) -> None:
    write(project, "clean.py", CLEAN)
    result = invoke("check", "clean.py")
    assert result.exit_code == 0
    assert result.stdout == "All checks passed.\n"
    assert result.stderr == ""


def test_check_reports_findings_and_exits_1(project: Path) -> None:
    write(project, "model.py", BUGGY)
    result = invoke("check", *SELECT, "model.py")
    assert result.exit_code == 1
    # the default text: the location line, a code frame and the fix's diff, a summary
    assert result.stdout == (
        f"model.py:5:5: GF101 {MESSAGE}\n"
        "  |\n"
        "5 | A = torch.tensor([a0, a1])  # keep me\n"
        "  |     ^^^^^^^^^^^^^^^^^^^^^^\n"
        "  = fix (safe): Use `torch.stack`\n"
        "    -A = torch.tensor([a0, a1])  # keep me\n"
        "    +A = torch.stack([a0, a1])  # keep me\n"
        "Found 1 finding (1 fixable with `gradfix fix`).\n"
    )
    concise = invoke("check", "--format", "concise", *SELECT, "model.py")
    assert concise.stdout == f"model.py:5:5: GF101 {MESSAGE}\n"


def test_check_defaults_to_the_current_directory_and_sorts(project: Path) -> None:
    write(project, "b.py", BUGGY)
    write(project, "a.py", BUGGY + UNSAFE.split("\n", 1)[1])
    write(project, "pkg/c.py", NO_FIX)
    write(project, ".venv/lib/skipped.py", BUGGY)
    result = invoke("check", *SELECT)
    assert result.exit_code == 1
    lines = [line for line in result.stdout.splitlines() if not line.startswith(" ")]
    lines = [line for line in lines if not line[:1].isdigit()]  # the code frames
    assert [line.split(": ")[0] for line in lines[:-1]] == [
        "a.py:5:5",
        "a.py:8:5",
        "b.py:5:5",
        os.path.join("pkg", "c.py") + ":3:5",
    ]
    assert lines[-1] == "Found 4 findings (2 fixable with `gradfix fix`, 1 with --unsafe-fixes)."


def test_check_unsafe_only_summary(project: Path) -> None:
    write(project, "m.py", UNSAFE)
    result = invoke("check", *SELECT, "m.py")
    assert result.stdout.endswith(
        "Found 1 finding (1 fixable with `gradfix fix --unsafe-fixes`).\n"
    )


def test_check_json(project: Path) -> None:
    write(project, "m.py", BUGGY + NO_FIX.split("\n", 1)[1])
    result = invoke("check", "--format", "json", *SELECT, "m.py")
    assert result.exit_code == 1
    findings = json.loads(result.stdout)
    assert [f["line"] for f in findings] == [5, 8]
    first = findings[0]
    assert set(first) == {
        "code",
        "name",
        "message",
        "path",
        "line",
        "col",
        "end_line",
        "end_col",
        "fix",
    }
    assert first["code"] == "GF101" and first["name"] == "tensor-from-tensors"
    assert (first["path"], first["col"], first["end_line"]) == ("m.py", 5, 5)
    assert first["end_col"] == first["col"] + len("torch.tensor([a0, a1])")
    assert first["fix"]["safety"] == "safe"
    assert findings[1]["fix"] is None


def test_check_json_without_findings_is_an_empty_array(project: Path) -> None:
    write(project, "m.py", CLEAN)
    result = invoke("check", "--format", "json", "m.py")
    assert (result.exit_code, json.loads(result.stdout)) == (0, [])


def test_check_concise_has_no_summary(project: Path) -> None:
    write(project, "m.py", BUGGY)
    result = invoke("check", "--format", "concise", *SELECT, "m.py")
    assert result.stdout == f"m.py:5:5: GF101 {MESSAGE}\n"


def test_paths_print_as_given(project: Path) -> None:
    write(project, "src/pkg/m.py", BUGGY)
    result = invoke("check", "--format", "concise", *SELECT, "src/", "./src/pkg/m.py")
    assert result.stdout.splitlines() == [f"src/pkg/m.py:5:5: GF101 {MESSAGE}"]


def test_missing_path_exits_2_and_the_rest_is_checked(project: Path) -> None:
    write(project, "m.py", BUGGY)
    result = invoke("check", *SELECT, "nope.py", "m.py")
    assert result.exit_code == 2
    assert result.stderr == "nope.py: no such file or directory\n"
    assert result.stdout.startswith("m.py:5:5: GF101")


def test_directory_without_python_files_is_a_warning(project: Path) -> None:
    write(project, "docs/index.md", "# docs\n")
    result = invoke("check", "docs")
    assert result.exit_code == 0
    assert result.stderr == "warning: docs: no Python files found\n"


def test_explicit_files_are_checked_whatever_their_suffix(project: Path) -> None:
    write(project, "train", BUGGY)
    assert invoke("check", *SELECT, "train").exit_code == 1


# --- select / ignore -------------------------------------------------------------------------


def test_ignore_silences_a_rule(project: Path) -> None:
    write(project, "m.py", BUGGY)
    result = invoke("check", "--ignore", "GF101", "m.py")
    assert "GF101" not in result.stdout


def test_select_by_prefix(project: Path) -> None:
    write(project, "m.py", BUGGY)
    result = invoke("check", "--select", "GF1", "m.py")
    assert result.exit_code == 1 and "GF101" in result.stdout


@pytest.mark.parametrize("option", ["--select", "--ignore"])
def test_unknown_code_exits_2_with_one_line(project: Path, option: str) -> None:
    write(project, "m.py", BUGGY)
    result = invoke("check", option, "GF101,GF999", "m.py")
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr == (
        f"error: unknown rule code or prefix 'GF999' in {option}"
        " (run `gradfix rules` to list them)\n"
    )


def test_fix_rejects_unknown_codes_too(project: Path) -> None:
    write(project, "m.py", BUGGY)
    result = invoke("fix", "--select", "XX", "--write", "--no-verify", "m.py")
    assert result.exit_code == 2
    assert (project / "m.py").read_text() == BUGGY


# --- fix: the diff ---------------------------------------------------------------------------


def test_fix_prints_a_diff_writes_nothing_and_exits_1(project: Path) -> None:
    write(project, "m.py", BUGGY)
    result = invoke("fix", *SELECT, "m.py")
    assert result.exit_code == 1
    assert result.stdout.startswith("--- a/m.py\n+++ b/m.py\n@@ -2,5 +2,5 @@\n")
    assert "-A = torch.tensor([a0, a1])  # keep me\n+A = torch.stack([a0, a1])  # keep me\n" in (
        result.stdout
    )
    assert result.stderr == "Would fix 1 finding in 1 file.\n"
    assert (project / "m.py").read_text() == BUGGY


def test_fix_without_a_diff_exits_0(project: Path) -> None:
    write(project, "m.py", CLEAN)
    result = invoke("fix", "m.py")
    assert (result.exit_code, result.stdout, result.stderr) == (0, "", "Nothing to fix.\n")


def test_fix_with_only_unfixable_findings_exits_0(project: Path) -> None:
    write(project, "m.py", NO_FIX)
    result = invoke("fix", *SELECT, "m.py")
    assert (result.exit_code, result.stdout) == (0, "")
    assert result.stderr == "No fixes available (1 remaining).\n"


def test_unsafe_fixes_need_the_flag(project: Path) -> None:
    write(project, "m.py", UNSAFE)
    result = invoke("fix", *SELECT, "m.py")
    assert (result.exit_code, result.stdout) == (0, "")
    assert result.stderr == "No fixes available (1 remaining, 1 fixable with --unsafe-fixes).\n"
    result = invoke("fix", *SELECT, "--unsafe-fixes", "m.py")
    assert result.exit_code == 1
    assert "+A = torch.stack([a[0] * 2, torch.as_tensor(1.0)])\n" in result.stdout


@pytest.mark.skipif(shutil.which("patch") is None, reason="needs GNU patch")
def test_the_diff_applies_with_patch(project: Path) -> None:
    write(project, "pkg/a.py", BUGGY)
    write(project, "pkg/b.py", BUGGY.replace("\n", "\r\n"))
    write(project, "pkg/c.py", "# coding: latin-1\n# caf\xe9\n".encode("latin-1") + BUGGY.encode())
    diff = CliRunner().invoke(app, ["fix", *SELECT, "pkg"]).stdout_bytes
    subprocess.run(["patch", "-p1", "--batch"], input=diff, check=True, capture_output=True)
    assert (project / "pkg/a.py").read_text() == FIXED
    assert (project / "pkg/b.py").read_bytes() == FIXED.replace("\n", "\r\n").encode()
    assert (project / "pkg/c.py").read_bytes().endswith(b"# caf\xe9\n" + FIXED.encode())


# --- fix --write -----------------------------------------------------------------------------


def test_write_fixes_and_is_idempotent(project: Path) -> None:
    write(project, "a.py", BUGGY)
    write(project, "b.py", BUGGY)
    write(project, "clean.py", CLEAN)
    result = invoke("fix", *SELECT, "--write", "--no-verify", ".")
    assert (result.exit_code, result.stdout) == (0, "")
    assert result.stderr == "Fixed 2 findings in 2 files.\n"
    assert (project / "a.py").read_text() == FIXED
    assert (project / "clean.py").read_text() == CLEAN
    again = invoke("fix", *SELECT, ".")
    assert (again.exit_code, again.stdout) == (0, "")
    assert invoke("fix", *SELECT, "--write", "--no-verify", ".").stderr == "Nothing to fix.\n"


def test_write_lists_remaining_findings_and_exits_1(project: Path) -> None:
    write(project, "m.py", BUGGY + NO_FIX.split("\n", 1)[1])
    result = invoke("fix", *SELECT, "--write", "--no-verify", "m.py")
    assert result.exit_code == 1
    assert result.stdout == f"m.py:8:5: GF101 {MESSAGE}\n"
    assert result.stderr == "Fixed 1 finding in 1 file (1 remaining).\n"


def test_write_unsafe(project: Path) -> None:
    write(project, "m.py", UNSAFE)
    result = invoke("fix", *SELECT, "--write", "--no-verify", "--unsafe-fixes", "m.py")
    assert result.exit_code == 0
    assert (project / "m.py").read_text() == UNSAFE_FIXED


def test_write_keeps_a_latin1_cookie_and_its_bytes(project: Path) -> None:
    header = "# -*- coding: latin-1 -*-\nname = 'café'\n"
    path = write(project, "m.py", (header + BUGGY).encode("latin-1"))
    assert invoke("fix", *SELECT, "--write", "--no-verify", "m.py").exit_code == 0
    assert path.read_bytes() == (header + FIXED).encode("latin-1")


def test_write_keeps_the_file_mode(project: Path) -> None:
    path = write(project, "run.py", "#!/usr/bin/env python3\n" + BUGGY)
    path.chmod(0o750)
    assert invoke("fix", *SELECT, "--write", "--no-verify", "run.py").exit_code == 0
    assert stat.S_IMODE(path.stat().st_mode) == 0o750
    assert path.read_text().endswith(FIXED)


# --- stdin -----------------------------------------------------------------------------------


def test_fix_stdin_prints_the_fixed_source(project: Path) -> None:
    result = invoke("fix", *SELECT, "-", input=BUGGY.replace("\n", "\r\n").encode())
    assert result.exit_code == 0
    assert result.stdout_bytes == FIXED.replace("\n", "\r\n").encode()
    assert result.stderr == ""  # an editor filter (vim's `:%!`) would put it in the buffer


def test_fix_stdin_is_silent_with_remaining_findings_and_notes(project: Path) -> None:
    result = invoke("fix", "--stdin-filename", "m.py", "-", input=NO_FIX)
    assert (result.exit_code, result.stdout, result.stderr) == (1, NO_FIX, "")


def test_quiet_prints_results_only(project: Path) -> None:
    write(project, "m.py", BUGGY)
    write(project, "big.py", "import torch\n" + "x = 1\n" * 100)
    write(project, "bad.py", SYNTAX_ERROR)
    settings = ["--config", "max-file-size=400"]
    fixed = invoke("fix", *SELECT, *settings, "--quiet", "m.py", "big.py", "bad.py")
    assert fixed.exit_code == 2
    assert fixed.stdout.startswith("--- a/m.py\n+++ b/m.py\n")
    assert fixed.stderr.splitlines() == ["bad.py: syntax error at line 2: '[' was never closed"]
    checked = invoke("check", *SELECT, *settings, "-q", "--format", "concise", "m.py", "bad.py")
    assert checked.stdout == f"m.py:5:5: GF101 {MESSAGE}\n"
    assert checked.stderr.splitlines() == fixed.stderr.splitlines()
    text = invoke("check", *SELECT, "-q", "m.py").stdout
    assert text.startswith(f"m.py:5:5: GF101 {MESSAGE}\n") and "Found" not in text


def test_fix_stdin_unchanged_and_remaining(project: Path) -> None:
    result = invoke("fix", *SELECT, "-", input=NO_FIX)
    assert (result.exit_code, result.stdout) == (1, NO_FIX)


def test_fix_stdin_with_a_syntax_error_echoes_the_input(project: Path) -> None:
    result = invoke("fix", "--stdin-filename", "pkg/m.py", "-", input=SYNTAX_ERROR)
    assert result.exit_code == 2
    assert result.stdout == SYNTAX_ERROR
    assert result.stderr.startswith("pkg/m.py: syntax error at line 2")
    assert len(result.stderr.splitlines()) == 1


def test_check_stdin_uses_the_stdin_filename(project: Path) -> None:
    result = invoke("check", *SELECT, "--stdin-filename", "pkg/m.py", input=BUGGY)
    assert result.exit_code == 1
    assert result.stdout.startswith(f"pkg/m.py:5:5: GF101 {MESSAGE}\n")
    assert invoke("check", *SELECT, "-", input=BUGGY).stdout.startswith("<stdin>:5:5: GF101")


def test_stdin_cannot_be_mixed_with_paths(project: Path) -> None:
    write(project, "m.py", CLEAN)
    result = invoke("check", "-", "m.py", input=CLEAN)
    assert result.exit_code == 2
    assert result.stderr == "error: `-` (stdin) cannot be combined with other paths\n"


# --- notes and internal errors ---------------------------------------------------------------


class BreaksSyntax(Rule):
    """## What it does\nReplaces `torch.tensor(...)` by a keyword (a broken fix)."""

    code = "GF901"
    name = "breaks-syntax"
    message = "broken"
    fix_safety = FixSafety.SAFE

    def visit_Call(self, node: ast.Call) -> None:
        if self.analysis.call_name(node) == "torch.tensor":
            fix = self.plan(
                lambda editor: [Edit(editor.node(node), cst.Name("def"))], "Use a keyword"
            )
            self.report(node, fix=fix)


class Crashes(Rule):
    """## What it does\nCrashes on files that mention `crash`."""

    code = "GF902"
    name = "crashes"
    message = "never"
    fix_safety = FixSafety.SAFE

    def visit_Module(self, node: ast.Module) -> None:
        if "crash" in self.context.source:
            raise RuntimeError("boom\nsecond line")


class TwoSteps(Rule):
    """## What it does\nRewrites `step1` to `step2`, then `step2` to `step3`: one finding,
    fixed in two passes."""

    code = "GF903"
    name = "two-steps"
    message = "a step to take"
    fix_safety = FixSafety.SAFE

    def visit_Name(self, node: ast.Name) -> None:
        following = {"step1": "step2", "step2": "step3"}.get(node.id)
        if following is not None:
            fix = self.plan_replace(node, lambda editor, old: cst.Name(following), "Take a step")
            self.report(node, fix=fix)


def test_fix_summary_counts_findings_and_the_fixes_applied(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gradfix.registry, "all_rules", lambda: [TwoSteps])
    write(project, "m.py", "import torch\nx = step1\n")
    preview = invoke("fix", "m.py")
    assert "+x = step3\n" in preview.stdout
    assert preview.stderr == "Would fix 1 finding (2 fixes) in 1 file.\n"
    written = invoke("fix", "--write", "--no-verify", "m.py")
    assert written.stderr == "Fixed 1 finding (2 fixes) in 1 file.\n"
    assert (project / "m.py").read_text() == "import torch\nx = step3\n"


@pytest.fixture
def fake_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gradfix.registry, "all_rules", lambda: [BreaksSyntax, Crashes])


def test_a_dropped_fix_is_noted(project: Path, fake_rules: None) -> None:
    write(project, "m.py", CLEAN)
    result = invoke("fix", "--write", "--no-verify", "m.py")
    assert result.stderr.splitlines()[0] == (
        "m.py: note: dropped a fix that broke the syntax: Use a keyword"
    )
    assert result.exit_code == 1  # the finding remains
    assert (project / "m.py").read_text() == CLEAN


def test_an_internal_error_is_one_line_and_the_run_goes_on(project: Path, fake_rules: None) -> None:
    write(project, "a.py", "import torch  # crash\n")
    write(project, "b.py", CLEAN)
    result = invoke("check", ".")
    assert result.exit_code == 2
    assert result.stderr == (
        "a.py: internal error in GF902 (crashes): RuntimeError: boom; please report"
        " (run with --verbose for the traceback)\n"
    )
    assert result.stdout.startswith("b.py:2:5: GF901 broken\n")
    verbose = invoke("check", "--verbose", ".")
    assert "Traceback (most recent call last)" in verbose.stderr
    assert 'raise RuntimeError("boom\\nsecond line")' in verbose.stderr


# --- worker processes ------------------------------------------------------------------------


def many_files(project: Path, count: int = 2 * gradfix.runner.MIN_FILES_PER_WORKER) -> None:
    for index in range(count):
        write(project, f"pkg/m{index:02}.py", BUGGY if index % 3 else NO_FIX)
    write(project, "pkg/bad.py", SYNTAX_ERROR)


def test_workers_give_the_same_output_as_one_process(project: Path) -> None:
    many_files(project)
    alone = invoke("check", *SELECT, "--jobs", "1", "pkg")
    parallel = invoke("check", *SELECT, "--jobs", "2", "pkg")
    assert (parallel.exit_code, parallel.stdout, parallel.stderr) == (
        alone.exit_code,
        alone.stdout,
        alone.stderr,
    )
    assert parallel.exit_code == 2 and parallel.stderr.startswith("pkg/bad.py: syntax error")
    written = invoke("fix", *SELECT, "--jobs", "2", "--write", "--no-verify", "pkg")
    assert written.stderr.splitlines()[-1].startswith(
        "Fixed 10 findings in 10 files (6 remaining)."
    )
    assert (project / "pkg/m01.py").read_text() == FIXED


def test_unpicklable_rules_fall_back_to_one_process(project: Path) -> None:
    many_files(project)
    files = sorted(str(path) for path in (project / "pkg").glob("m*.py"))

    class LocalRule(BreaksSyntax):  # defined in a function: cannot be sent to a worker
        pass

    options = gradfix.runner.RunOptions(rules=[LocalRule])
    results = gradfix.runner.process_files(files, options, jobs=2)
    assert [len(result.findings) for result in results] == [1] * len(files)


# --- rules, explain, version -----------------------------------------------------------------


def test_rules_table() -> None:
    result = invoke("rules")
    assert result.exit_code == 0
    header, *rows = result.stdout.splitlines()
    assert header.split() == ["CODE", "NAME", "FIX", "DEFAULT", "SUMMARY"]
    gf101 = next(row for row in rows if row.startswith("GF101"))
    assert gf101.split()[:5] == [
        "GF101",
        "tensor-from-tensors",
        "sometimes",
        "safe/unsafe",
        "enabled",
    ]
    gf403 = next(row for row in rows if row.startswith("GF403"))
    assert gf403.split()[:4] == ["GF403", "loss-accumulation", "safe/unsafe", "enabled"]
    assert "torch.stack" in gf101


def test_rules_json() -> None:
    rules = json.loads(invoke("rules", "--format", "json").stdout)
    gf101 = next(rule for rule in rules if rule["code"] == "GF101")
    assert gf101 == {
        "code": "GF101",
        "name": "tensor-from-tensors",
        "message": MESSAGE,
        "safety": "unsafe",
        "default_enabled": True,
        "summary": gf101["summary"],
        "fix": "sometimes safe/unsafe",
        "fix_availability": "sometimes",
        "fix_safeties": ["safe", "unsafe"],
    }
    assert gf101["summary"].startswith("Finds `torch.tensor([...])`")


@pytest.mark.parametrize("code", ["GF101", "gf101", "tensor-from-tensors"])
def test_explain(code: str) -> None:
    result = invoke("explain", code)
    assert result.exit_code == 0
    assert result.stdout.startswith(
        "# GF101 tensor-from-tensors\n\nFix: sometimes safe/unsafe. Some findings get a fix "
        "(safe or unsafe, depending on the finding); the others are only reported."
    )
    for section in ["What it does", "Why is this bad?", "Example", "Use instead", "Fix safety"]:
        assert f"\n## {section}\n" in result.stdout


def test_explain_unknown_code() -> None:
    result = invoke("explain", "GF999")
    assert result.exit_code == 2
    assert result.stderr == "error: unknown rule 'GF999' (run `gradfix rules` to list them)\n"


def test_version() -> None:
    result = invoke("--version")
    assert result.exit_code == 0 and result.stdout.startswith("gradfix ")


def test_usage_error_exits_2() -> None:
    assert invoke("check", "--format", "yaml").exit_code == 2


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["check", "--format", "xml", "."],
            "error: unknown format 'xml' (choose from: text, concise, json, sarif, github)",
        ),
        (["rules", "--format", "xml"], "error: unknown format 'xml' (choose from: text, json)"),
        (
            ["fix", "--executor", "dask", "."],
            "error: unknown executor 'dask' (choose from: local, ray)",
        ),
        (
            ["check", "--jobs", "many", "."],
            "error: invalid value for --jobs: input should be a valid integer, unable to parse "
            "string as an integer (see gradfix check -h)",
        ),
        (
            ["check", "--formt", "json", "."],
            "error: no such option: --formt; did you mean --format or --report? "
            "(see gradfix check -h)",
        ),
    ],
)
def test_a_usage_error_is_one_plain_line(args: list[str], line: str) -> None:
    """Not the usage, a hint and Pydantic's `Value error, 'xml' is not one of ...`."""
    result = invoke(*args)
    assert (result.exit_code, result.stderr) == (2, line + "\n")


# --- the installed command -------------------------------------------------------------------


def test_python_m_gradfix_without_torch_or_libcst_at_import(project: Path) -> None:
    write(project, "m.py", BUGGY)
    code = (
        "import sys\n"
        "sys.modules['torch'] = None  # any `import torch` now fails\n"
        "import gradfix.cli\n"
        "assert 'libcst._nodes' not in sys.modules, 'the CLI imports LibCST at import time'\n"
        "sys.argv = ['gradfix', 'check', '--select', 'GF101', 'm.py']\n"
        "gradfix.cli.main()\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 1, result.stderr
    assert result.stdout.startswith("m.py:5:5: GF101")
    module = subprocess.run(
        [sys.executable, "-m", "gradfix", "fix", "--write", "--no-verify", "m.py"],
        capture_output=True,
        text=True,
    )
    assert (module.returncode, module.stderr) == (0, "Fixed 1 finding in 1 file.\n")


# --- help ----------------------------------------------------------------------------------


def _help(command: str) -> str:
    return " ".join(invoke(command, "--help").stdout.split())


def test_check_help_is_true() -> None:
    """check has no --verify, and its default format prints code frames and diffs."""
    text = _help("check")
    assert "--verify" not in text
    assert "one line per finding and a summary" not in text
    assert "one `path:line:col: CODE message` line per finding." not in text
    assert "code frame" in text


# (not `trace`: its help shows the traced program's own options, `python train.py --lr 0.1`)
@pytest.mark.parametrize("command", ["check", "fix", "verify", "rules", "explain", "lsp"])
def test_help_names_only_options_the_command_has(command: str) -> None:
    import re

    import typer.main

    click_command = typer.main.get_command(app).commands[command]  # type: ignore[attr-defined]
    names = [[*param.opts, *param.secondary_opts] for param in click_command.params]
    options = {"--help", *(name for opts in names for name in opts)}
    mentioned = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", _help(command)))
    assert mentioned - options == set()


def test_fix_help_states_the_interactive_exit_status() -> None:
    assert "--interactive 0 no finding left, 1 findings left" in _help("fix")


def test_the_command_ends_without_teardown_but_runs_exit_handlers(project: Path) -> None:
    """``gradfix`` (``run``) ends the process without tearing the interpreter down, after
    stopping idle thread pools and waiting for other threads, running ``atexit`` handlers
    and flushing the output; the exit status is the command's. ``main`` still raises
    ``SystemExit``."""
    write(project, "m.py", BUGGY)
    code = (
        "import atexit, sys, threading, time\n"
        "from concurrent.futures import ThreadPoolExecutor\n"
        "import gradfix.cli as cli\n"
        "idle = ThreadPoolExecutor(1)  # left open, as the language server's engine\n"
        "idle.submit(int).result()\n"
        "atexit.register(lambda: print('atexit handler', flush=True))\n"
        "ending = threading.Event()\n"
        "def late():\n"
        "    ending.wait()  # still running when the command ends\n"
        "    time.sleep(0.1)\n"
        "    print('thread done', flush=True)\n"
        "threading.Thread(target=late).start()\n"
        "exit_now = cli._exit_now\n"
        "def exiting(code):\n"
        "    ending.set()\n"
        "    exit_now(code)\n"
        "cli._exit_now = exiting\n"
        "sys.argv = ['gradfix', *sys.argv[1:]]\n"
        "try:\n"
        "    cli.{entry}()\n"
        "except SystemExit as exit_:\n"
        "    print('main raised', exit_.code, flush=True)\n"
        "    ending.set()\n"
        "    raise\n"
    )
    args = ["check", "--select", "GF101", "--format", "concise", "m.py"]
    ran = subprocess.run(
        [sys.executable, "-c", code.format(entry="run"), *args],
        capture_output=True,
        text=True,
        timeout=120,  # an idle thread pool must not hang the end
    )
    assert ran.returncode == 1, ran.stderr
    lines = ran.stdout.splitlines()
    assert lines[0].startswith("m.py:5:5: GF101")
    assert lines[1:] == ["thread done", "atexit handler"]  # no SystemExit out of run()
    called = subprocess.run(
        [sys.executable, "-c", code.format(entry="main"), *args], capture_output=True, text=True
    )
    assert called.returncode == 1
    assert called.stdout.splitlines()[1:] == ["main raised 1", "thread done", "atexit handler"]
