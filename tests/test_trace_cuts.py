"""``gradfix trace``: a loss without graph traced back to where it lost it (a no_grad block
of the program, ``requires_grad`` turned off), and a graph carried across steps by a value
made from leaves the step never trains (they need not require grad)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gradfix.registry import fix_intent
from gradfix.trace.launch import TraceResult, run_trace

pytest.importorskip("torch")


def trace(tmp_path: Path, source: str, name: str = "prog.py") -> TraceResult:
    script = tmp_path / name
    script.write_text(textwrap.dedent(source), encoding="utf-8")
    return run_trace([sys.executable, str(script)], stdout=subprocess.DEVNULL)


def located(result: TraceResult) -> set[tuple[str, str, str, int]]:
    return {(f.kind, f.code, os.path.basename(f.path), f.line) for f in result.findings}


NO_GRAD_LOSS = """\
    import torch

    w = torch.randn(3, requires_grad=True)
    x = torch.randn(4, 3)
    with torch.no_grad():
        metric = (x @ w).mean()  # a metric: no graph wanted
    total = 0
    with torch.no_grad():
        total += (x @ w).pow(2).sum()
    loss = total / 4
    loss.backward()
"""


def test_a_loss_computed_in_a_no_grad_block_is_pinned_to_the_block(tmp_path: Path) -> None:
    result = trace(tmp_path, NO_GRAD_LOSS)
    assert located(result) == {("no-grad-cut", "GF101", "prog.py", 8)}
    (finding,) = result.findings
    assert "computed in this no_grad block" in finding.message
    assert "backward at line 11" in finding.message
    assert finding.evidence["backward_at"]["line"] == 11


def test_a_no_grad_block_in_a_function_is_found_through_the_call(tmp_path: Path) -> None:
    result = trace(
        tmp_path,
        """\
        import torch

        def score(w, x):
            with torch.no_grad():
                return (x @ w).sum()

        w = torch.randn(3, requires_grad=True)
        loss = score(w, torch.randn(2, 3)) * 2
        loss.backward()
        """,
    )
    assert located(result) == {("no-grad-cut", "GF101", "prog.py", 4)}


def test_a_target_computed_in_no_grad_trains_as_always(tmp_path: Path) -> None:
    result = trace(
        tmp_path,
        """\
        import torch

        teacher = torch.nn.Linear(3, 1)
        student = torch.nn.Linear(3, 1)
        for _ in range(3):
            x = torch.randn(4, 3)
            with torch.no_grad():
                target = teacher(x)
            loss = ((student(x) - target) ** 2).mean()
            loss.backward()
        """,
    )
    assert result.findings == [] and result.steps == 3


@pytest.mark.parametrize(
    "freeze",
    [
        "for p in model.parameters():\n    p.requires_grad = False",
        "for p in model.parameters():\n    p.requires_grad_(False)",
        "model.requires_grad_(False)",
    ],
)
def test_parameters_frozen_before_the_backward_are_pinned_where_frozen(
    tmp_path: Path, freeze: str
) -> None:
    source = "import torch\n\nmodel = torch.nn.Linear(2, 1)\n" + freeze + "\n"
    line = source.count("\n")  # the freezing statement's last line
    source += "out = model(torch.ones(2)).sum()\nout.backward()\n"
    result = trace(tmp_path, source)
    assert located(result) == {("frozen-cut", "GF101", "prog.py", line)}
    assert "`requires_grad` is turned off here" in result.findings[0].message


def test_a_frozen_backbone_under_a_trained_head_is_no_finding(tmp_path: Path) -> None:
    result = trace(
        tmp_path,
        """\
        import torch

        backbone = torch.nn.Linear(3, 3)
        head = torch.nn.Linear(3, 1)
        for p in backbone.parameters():
            p.requires_grad = False
        for _ in range(2):
            head(backbone(torch.randn(2, 3))).sum().backward()
        """,
    )
    assert result.findings == [] and result.steps == 2


def test_parameters_unfrozen_again_are_not_blamed(tmp_path: Path) -> None:
    result = trace(
        tmp_path,
        """\
        import torch

        model = torch.nn.Linear(2, 1)
        model.requires_grad_(False)
        model.requires_grad_(True)
        x = torch.ones(2)
        with torch.no_grad():
            y = model(x).sum()
        y.backward()
        """,
    )
    assert located(result) == {("no-grad-cut", "GF101", "prog.py", 7)}


UNTRAINED_LABELS = """\
    import torch

    X = torch.randn(40, 2)
    true_w = torch.randn(2, 1, requires_grad=True)
    Y = X @ true_w + 1
    w = torch.zeros(2, 1, requires_grad=True)
    for i in range(0, 40, 10):
        loss = ((X[i:i + 10] @ w - Y[i:i + 10]) ** 2).mean()
        loss.backward()
        with torch.no_grad():
            w -= 0.1 * w.grad
            w.grad.zero_()
    print(round(loss.item(), 4))
"""


def test_labels_made_from_an_untrained_leaf_are_pinned_to_the_leaf(tmp_path: Path) -> None:
    result = trace(tmp_path, UNTRAINED_LABELS)
    assert located(result) == {("untrained-leaf", "GF401", "prog.py", 4)}
    (finding,) = result.findings
    assert finding.evidence["carried_from"]["line"] == 5
    assert "create it without requires_grad" in finding.message


def test_a_carried_state_of_trained_weights_is_found_where_it_is_used(tmp_path: Path) -> None:
    result = trace(
        tmp_path,
        """\
        import torch

        w = torch.randn(3, 3, requires_grad=True)
        h = torch.tanh(w @ torch.ones(3))
        for step in range(3):
            h = torch.tanh(w @ h)
            h.sum().backward()
            with torch.no_grad():
                w -= 0.1 * w.grad
        """,
    )
    assert {(f.kind, f.line) for f in result.findings} == {("backward-twice", 6)}


def test_labels_without_a_training_step_between_backward_calls_are_not_blamed(
    tmp_path: Path,
) -> None:
    source = UNTRAINED_LABELS.replace("w -= 0.1 * w.grad", "pass")
    result = trace(tmp_path, source)
    assert {f.kind for f in result.findings} == {"backward-twice"}


def trace_write(tmp_path: Path, source: str) -> tuple[subprocess.CompletedProcess[str], str]:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(source), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "gradfix", "trace", "--write", "--format", "concise", "--",
         sys.executable, script.name],
        capture_output=True, text=True, cwd=tmp_path, check=False,
    )  # fmt: skip
    return done, script.read_text(encoding="utf-8")


def test_trace_write_unwraps_the_no_grad_block_of_a_backpropagated_loss(tmp_path: Path) -> None:
    done, fixed = trace_write(
        tmp_path,
        """\
        import torch

        torch.manual_seed(0)
        model = torch.nn.Linear(3, 1)
        x = torch.randn(4, 3)
        # the loss
        with torch.no_grad():
            out = model(x)
            loss = (out ** 2).mean()
        loss.backward()
        print(round(loss.item(), 4))
        """,
    )
    assert " GF101 verified: " in done.stdout, done.stdout + done.stderr
    assert "# the loss\nout = model(x)\nloss = (out ** 2).mean()\nloss.backward()" in fixed
    subprocess.run([sys.executable, "train.py"], cwd=tmp_path, check=True, capture_output=True)


@pytest.mark.parametrize(
    ("freeze", "kept"),
    [
        ("    p.requires_grad = False", "    p.requires_grad = True"),
        ("    p.requires_grad_(False)", "    p.requires_grad_()"),
    ],
)
def test_trace_write_keeps_frozen_parameters_trainable(
    tmp_path: Path, freeze: str, kept: str
) -> None:
    source = (
        "import torch\n\ntorch.manual_seed(0)\nmodel = torch.nn.Linear(2, 1)\n"
        f"for p in model.parameters():\n{freeze}\n"
        "out = model(torch.ones(2)).sum()\nout.backward()\nprint(model.weight.grad)\n"
    )
    done, fixed = trace_write(tmp_path, source)
    assert " GF101 verified: " in done.stdout, done.stdout + done.stderr
    assert f"for p in model.parameters():\n{kept}\n" in fixed


def test_trace_write_creates_untrained_leaves_without_requires_grad(tmp_path: Path) -> None:
    done, fixed = trace_write(
        tmp_path,
        """\
        import torch

        torch.manual_seed(0)
        true_w = torch.randn(2, 1, requires_grad=True)
        true_b = torch.randn(1, requires_grad=True)
        X = torch.randn(40, 2)
        Y = X @ true_w + true_b
        w = torch.zeros(2, 1, requires_grad=True)
        for i in range(0, 40, 10):
            loss = ((X[i:i + 10] @ w - Y[i:i + 10]) ** 2).mean()
            loss.backward()
            with torch.no_grad():
                w -= 0.1 * w.grad
                w.grad.zero_()
        print(round(loss.item(), 4))
        """,
    )
    assert " GF401 verified: " in done.stdout, done.stdout + done.stderr
    assert "true_w = torch.randn(2, 1)\ntrue_b = torch.randn(1)\n" in fixed


def _tensor(values: list[float]) -> dict[str, object]:
    return {"shape": [len(values)], "dtype": "float32", "numel": len(values), "values": values,
            "truncated": False}  # fmt: skip


def _run(leaf_lines: list[int], grads: dict[str, list[float]]) -> dict[str, object]:
    leaves = [
        {"index": k, "shape": [2], "dtype": "float32", "origin": "torch.randn", "line": line}
        for k, line in enumerate(leaf_lines)
    ]
    event = {"index": 0, "kind": "backward", "line": 9, "roots": [_tensor([3.0])],
             "objective": 3.0, "error": None, "frozen": [], "padding_rows": {},
             "grads": {k: _tensor(v) for k, v in grads.items()}}  # fmt: skip
    return {"outcome": {"status": "ok"}, "leaves": leaves, "events": [event], "event_count": 1,
            "globals": {}}  # fmt: skip


def test_the_verifier_lets_a_gf401_fix_leave_out_a_leaf_and_compares_the_rest() -> None:
    from gradfix.verify.oracle import compare_traces

    before = _run([4, 7], {"0": [5.0, 6.0], "1": [1.0, 2.0]})
    after = _run([7], {"0": [1.0, 2.0]})
    verdict = compare_traces(before, after, intent=fix_intent(["GF401"]))
    assert verdict.status == "verified" and "#0 (line 7)" in verdict.reason
    assert "the leaves made at line 4" in " ".join(verdict.evidence["notes"])
    wrong = _run([7], {"0": [1.0, 2.5]})
    assert compare_traces(before, wrong, intent=fix_intent(["GF401"])).status == "rejected"
    other = compare_traces(
        before, after, intent=fix_intent(["GF204"])
    )  # other rules keep every leaf
    assert other.status == "rejected" and "creates 1 leaf tensor(s)" in other.reason
    moved = _run([5], {"0": [1.0, 2.0]})  # not one of before's leaves
    assert compare_traces(before, moved, intent=fix_intent(["GF401"])).status == "rejected"
