"""``gradfix trace``: the program runs once under the tracer; each pitfall it hits is found
on the right line with the rule whose fix applies, and the program's own behaviour (output,
exit status, errors) is kept. Each script under tests/data/trace/ has its bug on a known line.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gradfix.trace import errors
from gradfix.trace.launch import RuntimeFinding, TraceResult, run_trace
from gradfix.trace.link import link_fixes

pytest.importorskip("torch")

DATA = Path(__file__).parent / "data" / "trace"


def trace_script(name: str, **options: object) -> TraceResult:
    return run_trace([sys.executable, str(DATA / name)], stdout=subprocess.DEVNULL, **options)  # type: ignore[arg-type]


def gradfix_trace(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gradfix", "trace", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        check=False,
    )


def gradfix_check(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gradfix", "check", "--no-cache", "--select", "ALL", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )


def located(result: TraceResult) -> set[tuple[str, str, int]]:
    return {(os.path.basename(f.path), f.code, f.line) for f in result.findings}


@pytest.mark.parametrize(
    ("script", "code", "line"),
    [
        ("inplace_saved.py", "GF204", 6),
        ("leaf_inplace.py", "GF201", 4),
        ("integer_grad.py", "GF105", 3),
        ("carried_graph.py", "GF401", 6),  # where the value of the earlier step is used
        ("carried_state_in_module.py", "GF401", 17),  # in the loop, not inside forward
        ("backward_same_graph_twice.py", "GF401", 5),  # the backward that freed the graph
        ("forward_before_loop.py", "GF401", 5),  # a loop reruns one backward: its forward
        ("shared_between_two_losses.py", "GF401", 7),  # the use the first backward freed
        ("tensor_from_tensors.py", "GF101", 5),
        ("loss_on_argmax.py", "GF110", 7),  # the first indices of the step, not the metric's
        ("nan_where.py", "GF301", 4),
        ("nan_where_exp.py", "GF301", 4),  # an overflow, not a singular point
        ("nan_data_masked.py", "GF301", 5),  # nan in the data, dropped by a mask
        ("nan_data_masked_in_helper.py", "GF301", 10),  # the mask's line, not the helper's
        ("data_cut.py", "GF205", 6),
        ("nonleaf_grad.py", "GF106", 6),
        ("nonleaf_made_on_creation.py", "GF103", 3),  # where the leaf was lost, not read
        ("loss_total.py", "GF403", 8),
        ("loss_history.py", "GF403", 12),
        ("trainer_history.py", "GF403", 12),
        ("step_between_backwards.py", "GF204", 9),
        ("inplace_after_other_changes.py", "GF204", 5),  # the first change after the save
        ("inplace_rebased.py", "GF204", 6),  # autograd names the in-place op's node
        ("inplace_flag_set_later.py", "GF204", 7),  # where the module was made in-place
        ("split_view_inplace.py", "GF204", 5),  # raised by the op, not by backward
        ("uncaught_only.py", "GF201", 6),  # read from the uncaught error's traceback
    ],
)
def test_each_pitfall_is_found_on_its_line(script: str, code: str, line: int) -> None:
    result = trace_script(script)
    assert located(result) == {(script, code, line)}


def test_inplace_change_names_the_op_that_saved_the_tensor() -> None:
    (finding,) = trace_script("inplace_saved.py").findings
    assert finding.evidence["saved_by"] == "SigmoidBackward0"
    assert finding.evidence["saved_at"]["line"] == 4
    assert finding.evidence["backward_at"]["line"] == 7
    assert finding.evidence["shape"] == [3]
    assert "modified by an inplace operation" in finding.evidence["error"]


def test_graph_carried_across_iterations_names_the_value_that_carried_it() -> None:
    (finding,) = trace_script("carried_graph.py").findings
    assert finding.step == 2
    assert finding.evidence["carried_from"]["line"] == 6
    assert finding.evidence["backward_at"]["line"] == 8


def test_a_list_of_losses_kept_across_steps_is_found_where_it_grows() -> None:
    (finding,) = trace_script("loss_history.py").findings
    assert finding.kind == "graph-kept" and finding.step == 3  # two earlier graphs held
    assert finding.evidence == {"held_by": "losses", "container": "list", "steps_kept": [1, 2]}
    assert "the list `losses` keeps the graphs of 2 earlier backward calls" in finding.message


def test_a_history_of_detached_losses_keeps_no_graph(tmp_path: Path) -> None:
    script = (DATA / "loss_history.py").read_text(encoding="utf-8")
    detached = tmp_path / "detached_history.py"
    detached.write_text(script.replace("losses.append(loss)", "losses.append(loss.detach())"))
    result = run_trace([sys.executable, str(detached)], stdout=subprocess.DEVNULL)
    assert result.findings == [] and result.steps == 4


def test_a_sum_of_losses_rebuilt_each_step_keeps_no_graph_across_steps() -> None:
    result = trace_script("sum_of_backpropagated_losses.py")
    assert result.findings == [] and result.steps == 6


def test_nan_is_pinned_to_the_op_whose_backward_made_it_not_to_the_leaf() -> None:
    (finding,) = trace_script("nan_where.py").findings
    assert finding.evidence["grad_fn"] == "SqrtBackward0"


def test_output_and_exit_status_pass_through() -> None:
    done = gradfix_trace("--", sys.executable, str(DATA / "exit_status.py"))
    assert "program output 3" in done.stdout
    assert "program error output" in done.stderr
    assert "exited with status 3 after 1 backward call" in done.stderr
    assert done.returncode == 2  # the program failed and nothing explains it


def test_the_programs_error_is_printed_without_the_tracers_frames() -> None:
    done = gradfix_trace("--format", "concise", "--", sys.executable, "leaf_inplace.py", cwd=DATA)
    assert "RuntimeError: a leaf Variable that requires grad" in done.stderr
    # the traceback's frames are the program's only: none of the tracer's package (a word
    # check would fail in a checkout named `gradfix`)
    program_error = done.stderr.split("\ntrace:")[0]
    frames = re.findall(r'File "([^"]+)"', program_error)
    package = str(Path(errors.__file__).resolve().parent.parent)
    assert [Path(f).resolve() for f in frames] == [(DATA / "leaf_inplace.py").resolve()]
    assert "tracer.py" not in done.stderr and package not in program_error
    assert done.stdout.startswith("leaf_inplace.py:4:1: GF201 a leaf Variable")
    assert done.returncode == 1


def test_an_error_inside_the_instrumentation_never_hides_the_programs_own() -> None:
    done = gradfix_trace("--format", "json", "--", sys.executable, str(DATA / "broken_tracer.py"))
    assert "ValueError: the program's own error" in done.stderr
    assert "ran with a broken tracer" in done.stderr  # the program's stdout, sent to stderr
    assert (
        "trace: the tracer hit 2 internal errors and may have missed findings "
        "(first: broken: KeyError: 'a bug in the tracer')"
    ) in done.stderr  # one per op with a grad_fn: `w * 2`, `.sum()`
    assert json.loads(done.stdout) == []
    assert done.returncode == 2


def test_json_keeps_stdout_for_the_report_and_marks_findings_from_a_run() -> None:
    done = gradfix_trace("--format", "json", "--", sys.executable, str(DATA / "nan_where.py"))
    (record,) = json.loads(done.stdout)
    assert record["source"] == "run"
    assert (record["code"], record["line"], record["step"]) == ("GF302", 4, 1)
    assert record["evidence"]["grad_fn"] == "SqrtBackward0"
    assert "tensor([   nan, 0.2500])" in done.stderr  # the program's print


def test_sarif_and_github_formats() -> None:
    script = str(DATA / "leaf_inplace.py")
    sarif = json.loads(gradfix_trace("--format", "sarif", "--", sys.executable, script).stdout)
    (result,) = sarif["runs"][0]["results"]
    assert result["ruleId"] == "GF201"
    assert result["locations"][0]["physicalLocation"]["region"]["startLine"] == 4
    github = gradfix_trace("--format", "github", "--", sys.executable, script).stdout
    assert github.startswith("::warning file=") and "line=4," in github


def test_a_hanging_program_is_stopped_at_the_timeout_with_what_was_found() -> None:
    result = trace_script("hang.py", timeout=10)
    assert result.status == "timeout"
    assert located(result) == {("hang.py", "GF201", 7)}


def test_max_steps_stops_a_training_loop_after_n_backward_calls() -> None:
    done = gradfix_trace("--max-steps", "2", "--", sys.executable, str(DATA / "training_loop.py"))
    assert done.stdout.splitlines()[:1] == ["step 0"]
    assert "step 1" not in done.stdout
    assert "stopped by --max-steps after 2 backward calls" in done.stderr
    assert done.returncode == 0


def test_dataloader_worker_processes() -> None:
    result = trace_script("dataloader_workers.py")
    assert located(result) == {("dataloader_workers.py", "GF204", 12)}
    assert result.exit_code == 1


def test_entry_point() -> None:
    done = gradfix_trace("--entry", "entry_module:main", "--format", "json", cwd=DATA)
    (record,) = json.loads(done.stdout)
    assert (record["path"], record["code"], record["line"]) == ("entry_module.py", "GF201", 6)
    assert done.returncode == 1


def test_a_program_without_torch_is_clean() -> None:
    done = gradfix_trace("--", sys.executable, "-c", "print('hello')")
    assert done.stdout.splitlines() == ["hello", "All checks passed."]
    assert done.returncode == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "error: no program to trace"),
        (("--", "no-such-program-gradfix"), "error: cannot run 'no-such-program-gradfix'"),
        (("--entry", "not an entry"), "error: --entry must be MODULE:FUNCTION"),
    ],
)
def test_bad_invocations_are_one_line(args: tuple[str, ...], message: str) -> None:
    done = gradfix_trace(*args)
    assert done.stderr.startswith(message) and len(done.stderr.splitlines()) == 1
    assert done.returncode == 2


def test_autograd_messages_are_read() -> None:
    message = (
        "one of the variables needed for gradient computation has been modified by an "
        "inplace operation: [torch.FloatTensor [4, 1]], which is output 0 of Relu, is at "
        "version 1; expected version 0 instead."
    )
    assert errors.kind_of(message) == "inplace-saved"
    assert errors.parse_saved_tensor_error(message) == errors.SavedTensorError((4, 1), "Relu", 1, 0)
    leaf = "... [torch.FloatTensor [3]] is at version 2; expected version 1 instead."
    assert errors.parse_saved_tensor_error(leaf) == errors.SavedTensorError((3,), None, 2, 1)
    assert errors.same_op("ReluBackward0", "Relu")
    assert not errors.same_op("ReluBackward0", "Sigmoid")
    assert errors.kind_of("shape mismatch") is None


def test_a_node_in_a_cpp_namespace_is_read() -> None:
    message = (
        "modified by an inplace operation: [torch.FloatTensor [10, 1]], which is output 0 of "
        "torch::autograd::CopySlices, is at version 10; expected version 9 instead."
    )
    details = errors.SavedTensorError((10, 1), "CopySlices", 10, 9)
    assert errors.parse_saved_tensor_error(message) == details


def test_runtime_finding_round_trips_through_its_record() -> None:
    record = {"code": "GF201", "kind": "leaf-inplace", "path": "/a.py", "line": 3,
              "message": "m", "step": 2, "evidence": {"error": "e"}}  # fmt: skip
    finding = RuntimeFinding.from_record(record)
    assert (finding.code, finding.line, finding.step, finding.evidence) == (
        "GF201",
        3,
        2,
        {"error": "e"},
    )


def test_a_runtime_finding_takes_the_fix_of_the_static_rule_covering_its_line() -> None:
    done = gradfix_trace("--format", "json", "--", sys.executable, str(DATA / "nan_where.py"))
    (record,) = json.loads(done.stdout)
    assert (record["code"], record["line"], record["col"]) == ("GF302", 4, 5)  # not GF301
    assert record["fix"]["safety"] == "safe"
    assert record["source"] == "run" and "verdict" not in record


def test_link_keeps_findings_no_static_rule_covers() -> None:
    result = trace_script("step_between_backwards.py")
    assert link_fixes(result.findings) == []


def test_write_applies_the_fix_verified_by_running_the_program_again(tmp_path: Path) -> None:
    script = tmp_path / "inplace_saved.py"
    script.write_text((DATA / "inplace_saved.py").read_text(encoding="utf-8"), encoding="utf-8")
    done = gradfix_trace("--write", "--format", "concise", "--", sys.executable, script.name,
                         cwd=tmp_path)  # fmt: skip
    assert "inplace_saved.py:6:1: GF204 verified: " in done.stdout
    assert "Applied 1 verified fix." in done.stderr
    assert "h = h + 1  # GF204" in script.read_text(encoding="utf-8")
    assert done.returncode == 1  # the run had a finding; the file is now fixed
    again = gradfix_trace("--", sys.executable, script.name, cwd=tmp_path)
    assert again.returncode == 0, again.stdout


@pytest.mark.parametrize(
    ("script", "code", "fixed_line"),
    [
        (
            "inplace_in_dispatched_helper.py",
            "GF204",
            "    x = x / x.norm()  # the caller's op saved x",
        ),
        ("view_inplace_in_call.py", "GF204", "total = torch.sigmoid(high.clamp(-1, 1)).sum()"),
    ],
)
def test_the_run_proves_what_static_analysis_cannot_and_its_fix_is_written(
    tmp_path: Path, script: str, code: str, fixed_line: str
) -> None:
    path = tmp_path / script
    path.write_text((DATA / script).read_text(encoding="utf-8"), encoding="utf-8")
    assert gradfix_check(path).returncode == 0  # no static finding: the run is the proof
    done = gradfix_trace("--write", "--format", "concise", "--", sys.executable, script,
                         cwd=tmp_path)  # fmt: skip
    assert f"{script}:" in done.stdout and f" {code} verified: " in done.stdout
    assert fixed_line in path.read_text(encoding="utf-8")


def test_a_state_carried_across_iterations_takes_the_detach_fix_on_the_runs_evidence() -> None:
    script = DATA / "carried_state_in_module.py"
    done = gradfix_trace("--format", "json", "--", sys.executable, str(script))
    (record,) = json.loads(done.stdout)
    assert (record["code"], record["line"]) == ("GF401", 17)
    assert record["fix"]["description"] == "Detach `h` where the step ends"
    # (not proven here: the oracle compares the truncated gradient with the derivative of
    # the whole run, which includes the earlier steps; see docs/recall.md)


def test_a_rule_takes_the_runs_facts_only_at_their_line() -> None:
    from gradfix.engine import single_fixes
    from gradfix.registry import find_rule
    from gradfix.trace.link import knowing

    source = (DATA / "inplace_in_dispatched_helper.py").read_text(encoding="utf-8")
    rule = find_rule("GF204")
    assert single_fixes(source, rules=[rule]) == []
    assert single_fixes(source, rules=[knowing(rule, {4: {"inplace-saved"}})]) == []
    (fix,) = single_fixes(source, rules=[knowing(rule, {5: {"inplace-saved"}})])
    assert fix.source is not None and "x = x / x.norm()" in fix.source


def test_an_inplace_flag_set_after_construction_is_turned_off_where_it_was_set(
    tmp_path: Path,
) -> None:
    from gradfix.engine import single_fixes
    from gradfix.registry import find_rule
    from gradfix.trace.link import knowing

    source = (DATA / "inplace_flag_set_later.py").read_text(encoding="utf-8")
    rule = find_rule("GF204")
    assert single_fixes(source, rules=[knowing(rule, {9: {"inplace-saved"}})]) == []
    (fix,) = single_fixes(source, rules=[knowing(rule, {7: {"inplace-saved"}})])
    assert fix.source is not None and "        m.inplace = False  # after" in fix.source
    script = tmp_path / "inplace_flag_set_later.py"
    script.write_text(source, encoding="utf-8")
    done = gradfix_trace("--write", "--format", "concise", "--", sys.executable, script.name,
                         cwd=tmp_path)  # fmt: skip
    assert "inplace_flag_set_later.py:7:" in done.stdout and " GF204 verified" in done.stdout
    assert "m.inplace = False" in script.read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("script", "moved"),
    [
        ("forward_before_loop.py", "for step in range(3):\n    hidden = torch.tanh(x * w)"),
        ("value_before_loop.py", "for step in range(2):\n    y = t @ a  # made once"),
    ],
)
def test_a_graph_built_before_the_loop_is_moved_into_it_on_the_runs_evidence(
    tmp_path: Path, script: str, moved: str
) -> None:
    path = tmp_path / script
    path.write_text((DATA / script).read_text(encoding="utf-8"), encoding="utf-8")
    done = gradfix_trace("--write", "--format", "concise", "--", sys.executable, script,
                         cwd=tmp_path)  # fmt: skip
    assert " GF401 verified" in done.stdout, done.stdout
    fixed = path.read_text(encoding="utf-8")
    assert moved in fixed
    ran = subprocess.run([sys.executable, script], cwd=tmp_path, capture_output=True, check=False)
    assert ran.returncode == 0


def test_the_verified_fixes_of_one_file_are_proven_and_written_together(tmp_path: Path) -> None:
    script = tmp_path / "two_nonleaf_grads.py"
    script.write_text((DATA / script.name).read_text(encoding="utf-8"), encoding="utf-8")
    done = gradfix_trace("--write", "--format", "concise", "--", sys.executable, script.name,
                         cwd=tmp_path)  # fmt: skip
    assert "GF106 verified (the fixes at lines 7, 8 together): " in done.stdout
    fixed = script.read_text(encoding="utf-8")
    assert "h.retain_grad()" in fixed and "out.retain_grad()" in fixed
    assert "Applied 1 verified fix." in done.stderr


def test_a_fix_that_runs_into_the_next_bug_is_proven_with_the_fix_of_that_one(
    tmp_path: Path,
) -> None:
    script = tmp_path / "two_inplace_changes.py"
    script.write_text((DATA / script.name).read_text(encoding="utf-8"), encoding="utf-8")
    done = gradfix_trace("--write", "--format", "concise", "--", sys.executable, script.name,
                         cwd=tmp_path)  # fmt: skip
    assert "GF204 rejected: after raised RuntimeError at line 8" in done.stdout  # alone
    assert "GF204 verified (Write `b = b + ...`, then Write `a = a * ...`)" in done.stdout
    fixed = script.read_text(encoding="utf-8")
    assert "a = a * 2\nb = b + 1\n" in fixed


def test_in_place_notes_stay_bounded_in_a_long_run() -> None:
    import torch

    from gradfix.trace.tracer import MAX_INPLACE_CHANGES, TraceMode, Tracer

    tracer = Tracer(lambda record: None)
    alive = []
    with TraceMode(tracer):
        for _ in range(MAX_INPLACE_CHANGES + 50):
            activation = torch.zeros(2, requires_grad=True) * 1
            activation.add_(1)
            alive.append(activation)  # distinct tensors: each change is noted
    assert len(tracer.inplace) == MAX_INPLACE_CHANGES


def test_a_fix_whose_run_reaches_a_nan_the_run_traced_elsewhere_is_blocked_not_rejected() -> None:
    """Two bugs: the in-place change this fix repairs hid a nan another line makes (the
    run traced its origin). The fixed run's nan gradient is that bug's: unverified."""
    from types import SimpleNamespace

    from gradfix.trace.link import _blocked_by_a_nan_elsewhere

    inplace = RuntimeFinding("GF204", "inplace-saved", "model.py", 15, "h += x", 1)
    nan = RuntimeFinding("GF301", "nonfinite", "utils.py", 35, "log at 0", 1)
    fix = SimpleNamespace(original=SimpleNamespace(path="model.py"), runtime=inplace)
    rejected = ("rejected", "after: backward call #1 gives leaf 2 a non-finite gradient", {})
    status, reason, evidence = _blocked_by_a_nan_elsewhere(rejected, fix, [inplace, nan])  # type: ignore[arg-type]
    assert status == "unverified" and "utils.py:35" in reason and evidence["blocked_by"]
    # a nan on the fix's own line, or another rejection, stays a rejection
    own = RuntimeFinding("GF301", "nonfinite", "model.py", 15, "log at 0", 1)
    assert _blocked_by_a_nan_elsewhere(rejected, fix, [own])[0] == "rejected"  # type: ignore[arg-type]
    changed = ("rejected", "forward changed: ...", {})
    assert _blocked_by_a_nan_elsewhere(changed, fix, [nan])[0] == "rejected"  # type: ignore[arg-type]


#: A program that starts a grandchild holding the output pipe, writes its pid, then hangs
#: (``hang``) or ends at once (``exit``).
SPAWNS_A_SLEEPER = """
import subprocess, sys, time
sleeper = subprocess.Popen(["sleep", "600"])
with open(sys.argv[1], "w") as out:
    out.write(str(sleeper.pid))
if sys.argv[2] == "hang":
    time.sleep(600)
"""


def process_alive(pid: int) -> bool:
    """The process exists and is not a zombie waiting to be reaped."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("ending", ["hang", "exit"])
def test_the_program_and_all_it_started_are_stopped(tmp_path: Path, ending: str) -> None:
    """A grandchild ``sleep 600`` kept the output pipe open after ``--timeout``: the run
    ends when the program does (or at the time limit), and nothing it started is left."""
    script, pid_file = tmp_path / "spawn.py", tmp_path / "sleeper.pid"
    script.write_text(SPAWNS_A_SLEEPER, encoding="utf-8")
    command = [sys.executable, "-m", "gradfix", "trace", "--timeout", "3", "--no-cache", "--"]
    try:
        done = subprocess.run(
            [*command, sys.executable, str(script), str(pid_file), ending],
            capture_output=True,  # a pipe: read until every process holding it has ended
            text=True,
            timeout=60,
            check=False,
            cwd=tmp_path,
        )
    finally:
        sleeper = int(pid_file.read_text()) if pid_file.exists() else None
        left = sleeper is not None and process_alive(sleeper)
        if left:
            os.kill(sleeper, 9)  # type: ignore[arg-type]
    assert sleeper is not None and not left
    assert done.returncode == (2 if ending == "hang" else 0), done.stderr
    assert ("stopped at the timeout" in done.stderr) == (ending == "hang"), done.stderr


def test_trace_has_a_time_limit_by_default() -> None:
    from gradfix.trace import launch

    assert launch.DEFAULT_TIMEOUT > 0
    done = gradfix_trace("--help")
    assert f"default: {launch.DEFAULT_TIMEOUT:g}" in done.stdout


#: A program that says when it gets Ctrl-C, and starts a grandchild that would outlive it.
CATCHES_CTRL_C = """
import subprocess, sys, time
sleeper = subprocess.Popen(["sleep", "600"])
with open(sys.argv[1], "w") as out:
    out.write(str(sleeper.pid))
try:
    time.sleep(600)
except KeyboardInterrupt:
    with open(sys.argv[2], "w") as out:
        out.write("interrupted")
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_ctrl_c_reaches_the_program_and_stops_what_it_started(tmp_path: Path) -> None:
    """The program runs in a session of its own, so the terminal's Ctrl-C reaches gradfix
    alone: gradfix passes it on (the program's ``except KeyboardInterrupt`` runs), then
    stops the whole group."""
    import signal
    import time

    script, pid_file, said = tmp_path / "ctrl_c.py", tmp_path / "sleeper.pid", tmp_path / "said"
    script.write_text(CATCHES_CTRL_C, encoding="utf-8")
    command = [sys.executable, "-m", "gradfix", "trace", "--no-cache", "--", sys.executable]
    gradfix = subprocess.Popen(
        [*command, str(script), str(pid_file), str(said)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=tmp_path,
    )
    try:
        deadline = time.monotonic() + 60
        while not pid_file.exists() or not pid_file.read_text():
            assert time.monotonic() < deadline and gradfix.poll() is None
            time.sleep(0.1)
        time.sleep(0.5)  # the program is in its sleep
        gradfix.send_signal(signal.SIGINT)  # to gradfix alone, as the terminal does now
        gradfix.wait(timeout=30)
    finally:
        if gradfix.poll() is None:
            gradfix.kill()
        sleeper = int(pid_file.read_text()) if pid_file.exists() else None
        left = sleeper is not None and process_alive(sleeper)
        if left:
            os.kill(sleeper, 9)  # type: ignore[arg-type]
    assert said.exists() and said.read_text() == "interrupted"
    assert not left
