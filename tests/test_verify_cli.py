"""Verified fixes on user code: ``gradfix verify``, ``verify --baseline``, ``fix --verify``.

Each verdict kind is produced by real execution (the oracle's runner processes), on
multi-file projects written to a temporary directory.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import libcst as cst
import pytest
from typer.testing import CliRunner

from gradfix.cli import app
from gradfix.edits import Editor
from gradfix.proof import accepted, verify_fixes
from gradfix.rule import FixSafety, Rule

pytest.importorskip("torch")

# A project: a helper module imported by the training script (the verifier must run the
# script with its own directory importable).
HELPERS = """import torch


def shifted_log(t):
    return torch.log(t + 1)
"""
TRAIN = """import torch
from helpers import shifted_log

a = torch.nn.Parameter(torch.rand(5))
a0 = a[0] * 2
a1 = torch.log(a[1] + 1)
A = torch.tensor([a0, a1])
shifted_log(A).sum().backward()
print(a.grad)
"""
# The fix is right, but the script needs a data file that is not there: unverified.
NEEDS_DATA = """import torch

data = torch.load("weights.pt")
w = torch.randn(3, requires_grad=True)
w.normal_()
(w * data).sum().backward()
"""
# Seed 000: the derived entry written into the tensor it comes from; the "detach"
# workaround runs, keeps the forward value and loses a gradient branch.
SEED_OLD = """import torch

w = torch.nn.Parameter(torch.tensor([0.5, 0.8]))
param = torch.zeros(3)
param[0] = w[0]
param[1] = w[1]
param[2] = param[0] / param[1]
param.sum().backward()
"""
SEED_DETACHED = SEED_OLD.replace("param[0] / param[1]", "(param[0] / param[1]).detach()")
SEED_STACKED = SEED_OLD.replace(
    "param[2] = param[0] / param[1]",
    "param = torch.stack([param[0], param[1], param[0] / param[1]])",
)


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "helpers.py").write_text(HELPERS, encoding="utf-8")
    (tmp_path / "train.py").write_text(TRAIN, encoding="utf-8")
    return tmp_path


def test_verify_proves_a_fix_in_a_multi_file_project(project: Path) -> None:
    code, out, err = invoke("verify", str(project))
    assert code == 0, out + err
    [line] = out.splitlines()
    assert line.startswith(f"{project / 'train.py'}:7:5: GF101 verified: ")
    assert "1 fix: 1 verified, 0 rejected, 0 unverified." in err
    assert (project / "train.py").read_text(encoding="utf-8") == TRAIN  # nothing written


def test_verify_json_gives_the_evidence(project: Path) -> None:
    code, out, _ = invoke("verify", "--format", "json", str(project / "train.py"))
    assert code == 0
    [record] = json.loads(out)
    assert {"code", "path", "line", "col", "verdict", "reason", "evidence"} <= set(record)
    assert record["verdict"] == "verified" and record["code"] == "GF101"
    evidence = record["evidence"]
    assert evidence["seed"] == 0 and "tolerances" in evidence


def test_unverified_when_the_code_cannot_run(tmp_path: Path) -> None:
    script = tmp_path / "needs_data.py"
    script.write_text(NEEDS_DATA, encoding="utf-8")
    code, out, _ = invoke("verify", str(script))
    assert code == 1
    assert ":5:1: GF201 unverified: " in out and "weights.pt" in out


def test_rejected_fix_is_never_applied(tmp_path: Path) -> None:
    """A rule whose fix changes the forward result (here: a test rule) is rejected."""

    class DoublesTheLoss(Rule):
        code = "GF999"
        name = "doubles-the-loss"
        message = "test rule with a wrong fix"
        fix_safety = FixSafety.SAFE

        def visit_Assign(self, node: ast.Assign) -> None:
            target = node.targets[0]
            if not (isinstance(target, ast.Name) and target.id == "loss"):
                return

            def doubled(editor: Editor, value: cst.CSTNode) -> cst.CSTNode:
                assert isinstance(value, cst.BaseExpression)
                return cst.BinaryOperation(value, cst.Multiply(), cst.Integer("2"))

            self.report(node, fix=self.plan_replace(node.value, doubled, "double it"))

    source = "import torch\nw = torch.rand(3, requires_grad=True)\nloss = (w * w).sum()\n"
    source += "loss.backward()\n"
    [verdict] = verify_fixes(str(tmp_path / "t.py"), source, rules=[DoublesTheLoss])
    assert verdict.status == "rejected" and "forward" in verdict.reason
    assert accepted([verdict], unverified=True) == set()


def test_baseline_rejects_the_detach_workaround(tmp_path: Path) -> None:
    old, detached, stacked = tmp_path / "old.py", tmp_path / "detached.py", tmp_path / "new.py"
    old.write_text(SEED_OLD, encoding="utf-8")
    detached.write_text(SEED_DETACHED, encoding="utf-8")
    stacked.write_text(SEED_STACKED, encoding="utf-8")
    code, out, _ = invoke("verify", "--baseline", str(old), str(detached))
    assert code == 1 and out.startswith(f"{detached}: rejected: ")
    code, out, _ = invoke("verify", "--baseline", str(old), str(stacked))
    assert code == 0 and out.startswith(f"{stacked}: verified: ")


def test_baseline_needs_two_existing_files(tmp_path: Path) -> None:
    code, _, err = invoke("verify", "--baseline", str(tmp_path / "a.py"))
    assert code == 2 and err.count("\n") == 1
    code, _, err = invoke("verify", "--baseline", str(tmp_path / "a.py"), str(tmp_path / "b.py"))
    assert code == 2 and "no such file" in err


def test_bad_file_is_one_line_and_the_run_goes_on(project: Path) -> None:
    (project / "broken.py").write_text("import torch\ndef f(:\n", encoding="utf-8")
    code, out, err = invoke("verify", str(project))
    assert code == 2
    assert "GF101 verified" in out
    assert "broken.py: syntax error at line 2" in err and "Traceback" not in err


def test_fix_verify_writes_only_proven_fixes(project: Path) -> None:
    script = project / "needs_data.py"
    script.write_text(NEEDS_DATA, encoding="utf-8")
    code, out, err = invoke("fix", "--verify", "--write", str(project))
    assert "GF101 verified" in err and "GF201 unverified" in err
    assert "torch.stack([a0, a1])" in (project / "train.py").read_text(encoding="utf-8")
    assert script.read_text(encoding="utf-8") == NEEDS_DATA  # unverified: not written
    assert code == 1 and "needs_data.py:5:1: GF201" in out  # the finding is left
    code, _, _ = invoke("fix", "--verify", "--write", "--unsafe-fixes", str(script))
    assert "with torch.no_grad():" in script.read_text(encoding="utf-8")


def test_fix_verify_preview_shows_each_verdict(project: Path) -> None:
    code, out, _ = invoke("fix", "--verify", str(project))
    assert code == 1
    verdict_line, *diff = out.splitlines()
    assert "GF101 verified" in verdict_line
    assert any(line.startswith("+A = torch.stack([a0, a1])") for line in diff)
    assert (project / "train.py").read_text(encoding="utf-8") == TRAIN


# A library file: nothing runs at import, the fixes sit in a property, a forward and a
# function that a call site in the file shows to take a tensor requiring grad.
LIBRARY = """import torch
from torch import nn


class Example(nn.Module):
    def __init__(self):
        super().__init__()
        self.paramn_ = nn.Parameter(torch.rand(2))

    @property
    def Param(self):
        paramn = torch.zeros([3])
        paramn[0] = self.paramn_[0]
        paramn[1] = self.paramn_[1]
        paramn[2] = paramn[0] / paramn[1]
        return paramn


class Head(nn.Module):
    def __init__(self, dim=4):
        super().__init__()
        self.w = nn.Parameter(torch.randn(dim))

    def forward(self, x):
        y = x * self.w
        return torch.tensor([y[..., 0].sum(), y[..., 1].sum()])


def gamma(x):
    mask = (x > 0).float()
    return mask * x + (1 - mask) * x ** 0.5


def train_step(model, x):
    return gamma(model(x))
"""


def test_probes_drive_functions_and_modules_the_file_never_runs(tmp_path: Path) -> None:
    library = tmp_path / "library.py"
    library.write_text(LIBRARY, encoding="utf-8")
    code, out, err = invoke("verify", "--format", "json", str(library))
    records = {r["code"]: r for r in json.loads(out)}
    assert records["GF202"]["evidence"]["harness"] == "probe: Example() through .Param"
    assert records["GF101"]["evidence"]["harness"] == "probe: Head() through forward()"
    assert all(r["verdict"] == "verified" for r in records.values()), records
    assert code == 0, err


def test_no_probe_for_code_that_needs_arguments_it_cannot_invent() -> None:
    from gradfix.verify.harness import probe_for

    source = (
        "import torch\nclass M(torch.nn.Module):\n    def __init__(self, n):\n"
        "        super().__init__()\n\n    def forward(self, x):\n        return x\n"
        "def f(x, n: int):\n    return x * n\n"
    )
    assert probe_for(source, 7) is None  # the constructor needs `n`
    assert probe_for(source, 9) is None  # `n` is an int
    assert probe_for("def f(x):\n    return x\n", 2) is not None


MODEL = """import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(3))
        self.w.normal_()

    def forward(self, x):
        return (x * self.w).sum()
"""
ENTRY = """import torch
from pkg.model import Net


def main():
    net = Net()
    loss = net(torch.ones(3))
    loss.backward()
"""


def test_entry_point_of_the_project_judges_fixes_in_an_imported_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("", encoding="utf-8")
    (tmp_path / "pkg" / "model.py").write_text(MODEL, encoding="utf-8")
    (tmp_path / "train.py").write_text(ENTRY, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    code, out, _ = invoke("verify", "--entry", "train:main", "--format", "json", "pkg")
    [record] = json.loads(out)
    assert record["verdict"] == "verified" and record["code"] == "GF201", record
    assert record["evidence"]["harness"] == "entry train:main"
    assert code == 0
    assert (tmp_path / "pkg" / "model.py").read_text(encoding="utf-8") == MODEL
    code, out, _ = invoke("verify", "--entry", "missing:main", "pkg")
    assert code == 1 and "unverified" in out and "No module named 'missing'" in out
    code, _, err = invoke("verify", "--entry", "train", "pkg")
    assert code == 2 and err.strip() == (
        "error: --entry must be MODULE:FUNCTION (e.g. train:main), not 'train'"
    )


LOOP = """import torch
from torch import nn


def train(steps=3):
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    total = 0.0
    for _ in range(steps):
        opt.zero_grad()
        loss = model(torch.ones(2, 3)).pow(2).mean()
        loss.backward()
        opt.step()
        total += loss
    print(f"mean loss {float(total) / steps:.4f}")
"""
RUN = "from loop import train\n\ntrain()\n"


def test_command_harness_records_every_backward_of_the_users_command(tmp_path: Path) -> None:
    (tmp_path / "loop.py").write_text(LOOP, encoding="utf-8")
    (tmp_path / "run.py").write_text(RUN, encoding="utf-8")
    from gradfix.verify.command import CommandHarness

    harness = CommandHarness("python run.py", root=str(tmp_path), timeout=120)
    try:
        source = LOOP.replace("total += loss", "total += loss.detach()")
        verdict = harness.prove(str(tmp_path / "loop.py"), source)
        assert verdict.status == "verified", verdict.reason
        assert verdict.evidence["backward_events"] == {"before": 3, "after": 3}
        wrong = LOOP.replace("pow(2)", "pow(3)")  # changes the forward: rejected
        assert harness.prove(str(tmp_path / "loop.py"), wrong).status == "rejected"
    finally:
        harness.close()
    assert (tmp_path / "loop.py").read_text(encoding="utf-8") == LOOP
    left = sorted(p.name for p in tmp_path.iterdir() if p.name != "__pycache__")
    assert left == ["loop.py", "run.py"]  # the patched copy lived elsewhere


SCALED_LEAF = """import torch

torch.manual_seed(0)
w = torch.randn(3, requires_grad=True) * 0.5
loss = (w * 2).sum()
loss.backward()
print(loss.item(), w.grad)
"""


def test_a_gradient_only_finite_differences_could_judge_is_unverified_under_cmd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GF103's fix makes ``w`` the leaf: its gradient (2) is not the leaf's of BEFORE (1).
    The script harness proves it by finite differences; a command cannot be
    differentiated, so the verdict is unverified with the reason, never rejected."""
    (tmp_path / "train.py").write_text(SCALED_LEAF, encoding="utf-8")
    monkeypatch.chdir(tmp_path)  # the command's project
    code, out, _ = invoke("verify", "--cmd", "python train.py", "train.py")
    assert " GF103 unverified: gradient changed" in out, out
    assert "cannot run under --cmd" in out and code == 1
    code, out, _ = invoke("verify", "train.py")
    assert " GF103 verified" in out, out


PROJECT = Path(__file__).resolve().parent / "data" / "projects" / "regression"


def test_a_realistic_project_end_to_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """tests/data/projects/regression: a model module whose forward cuts the graph, a
    training entry point in another file, and a script that needs a lab data file."""
    import shutil
    import subprocess
    import sys

    root = tmp_path / "regression"
    shutil.copytree(PROJECT, root)
    monkeypatch.chdir(root)
    code, out, _ = invoke("verify", "--format", "json", ".")
    records = {(r["path"], r["code"]): r for r in json.loads(out)}
    model = records[("models.py", "GF101")]
    assert model["verdict"] == "verified", model
    # proven as the user runs it: through the project's script that imports it
    assert model["evidence"]["harness"] == "run through train.py, which imports it"
    calibrate = records[("calibrate.py", "GF201")]
    assert calibrate["verdict"] == "unverified" and "measurements.pt" in calibrate["reason"]
    assert code == 1

    code, out, _ = invoke("verify", "--entry", "train:main", "models.py")
    assert code == 0 and "models.py:16:16: GF101 verified" in out

    code, _, err = invoke("fix", "--verify", "--write", ".")
    assert "torch.stack([mean, spread])" in (root / "models.py").read_text(encoding="utf-8")
    assert (root / "calibrate.py").read_bytes() == (PROJECT / "calibrate.py").read_bytes()
    trained = subprocess.run(
        [sys.executable, "train.py"], cwd=root, capture_output=True, text=True, check=False
    )
    assert trained.returncode == 0 and "mean loss" in trained.stdout, trained.stderr


def test_probe_shapes_follow_the_layers_the_code_builds() -> None:
    from gradfix.verify.harness import _shape_ladder

    source = (
        "class Net(nn.Module):\n    def __init__(self, features=5):\n"
        "        self.fc = nn.Linear(features, 2)\n        self.conv = nn.Conv1d(7, 3, 1)\n"
    )
    ladder = _shape_ladder(ast.parse(source))
    assert ladder[:3] == ((4, 5), (2, 4, 5), (2, 7, 8))
    assert (4,) in ladder  # the generic ladder follows


def test_fixes_that_only_work_together_are_verified_together() -> None:
    """Seed 002: three backward calls through one graph; each retain_graph=True alone
    still fails at the next call, both together are the proven fix."""
    fixture = Path(__file__).resolve().parent.parent / "fixtures" / "backward_twice"
    path = fixture / "seed_backward_again.before.py"
    code, out, _ = invoke("verify", "--format", "json", str(path))
    records = json.loads(out)
    assert len(records) == 2 and code == 0
    for record in records:
        assert record["verdict"] == "verified"
        assert record["reason"].startswith("verified together with the file's other fixes")
        assert record["evidence"]["proven"] == "with the file's other fixes"


def test_jobs_is_the_number_of_fixes_verified_at_once(tmp_path: Path, monkeypatch) -> None:
    """`verify --jobs` (its help: "Fixes verified at the same time") reaches the verifier."""
    from gradfix import proof

    seen: list[int] = []

    def verify_fixes(path: str, source: str, **options: object) -> list:
        seen.append(options["jobs"])  # type: ignore[arg-type]
        return []

    monkeypatch.setattr(proof, "verify_fixes", verify_fixes)
    (tmp_path / "a.py").write_text(
        "import torch\nw = torch.randn(3, requires_grad=True)\nw.normal_()\n", encoding="utf-8"
    )
    invoke("verify", "-j", "1", str(tmp_path))
    invoke("verify", str(tmp_path))
    assert seen == [1, 2]
