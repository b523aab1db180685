"""``fix --write`` proves each fix before writing it (when torch can be imported).

Rejected fixes are never written, unverified ones follow the safe/unsafe classes,
``--no-verify`` is the static behaviour, ``--verify`` applies only proven fixes, and
without torch ``--write`` falls back to static fixing with one note.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gradfix.cli import app

pytest.importorskip("torch")

# GF205's fix of a `.data` read inside forward is `.detach()`: the layer still never
# trains, so the fix is rejected.
DATA_IN_FORWARD = (Path(__file__).parent / "data" / "data_in_forward.py").read_text(
    encoding="utf-8"
)
# GF101: a silent graph cut whose fix is proven against finite differences.
SILENT_CUT = """import torch

w = torch.randn(3, requires_grad=True)
a = torch.tensor([w[0] * 2, w[1]])
(a.sum() + w.sum()).backward()
"""
# The GF201 fix is right, but the script needs a data file that is not there: unverified.
NEEDS_DATA = """import torch

data = torch.load("weights.pt")
w = torch.randn(3, requires_grad=True)
w.normal_()
(w * data).sum().backward()
"""
GF205 = ("--select", "GF205", "--unsafe-fixes")


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_write_never_writes_a_rejected_fix_by_default(tmp_path: Path) -> None:
    model = write(tmp_path / "model.py", DATA_IN_FORWARD)
    train = write(tmp_path / "train.py", SILENT_CUT)
    code, out, err = invoke("fix", "--write", "--select", "GF205,GF101", "--unsafe-fixes",
                            str(tmp_path))  # fmt: skip
    assert model.read_text(encoding="utf-8") == DATA_IN_FORWARD  # rejected: not written
    assert "torch.stack([w[0] * 2, w[1]])" in train.read_text(encoding="utf-8")
    assert code == 1 and f"{model}:12:20: GF205" in out  # the finding stays
    assert f"{model}:12:20: GF205 rejected: gradient lost" in err
    assert f"{train}:4:5: GF101 verified: " in err
    assert "Fixed 1 finding in 1 file (1 remaining: 1 fix rejected by verification)." in err


# The same read on the weight nn.Linear made (not declared by the program).
LINEAR_DATA_IN_FORWARD = DATA_IN_FORWARD.replace(
    "self.w = nn.Parameter(torch.ones(3))", "self.lin = nn.Linear(3, 3)"
).replace("x * self.w.data + self.b", "x @ self.lin.weight.data.t() + self.b")


def test_write_never_writes_a_fix_that_leaves_a_torch_made_weight_cut(tmp_path: Path) -> None:
    model = write(tmp_path / "model.py", LINEAR_DATA_IN_FORWARD)
    code, _, err = invoke("fix", "--write", *GF205, str(model))
    assert model.read_text(encoding="utf-8") == LINEAR_DATA_IN_FORWARD
    assert code == 1
    lost = f"{model}:12:20: GF205 rejected: gradient lost: leaf 0 (nn.Parameter at line 8)"
    assert lost in err


def test_no_verify_is_the_static_behaviour(tmp_path: Path) -> None:
    model = write(tmp_path / "model.py", DATA_IN_FORWARD)
    code, _, err = invoke("fix", "--write", "--no-verify", *GF205, str(model))
    assert code == 0, err
    assert "self.w.detach()" in model.read_text(encoding="utf-8")
    assert "verified" not in err and "rejected" not in err


def test_unverified_fixes_follow_the_safety_classes_by_default(tmp_path: Path) -> None:
    script = write(tmp_path / "needs_data.py", NEEDS_DATA)
    code, _, err = invoke("fix", "--write", "--select", "GF201", str(script))
    assert "GF201 unverified: could not run: FileNotFoundError" in err
    assert "with torch.no_grad():" in script.read_text(encoding="utf-8")  # safe: written
    assert code == 0
    write(script, NEEDS_DATA)
    code, _, err = invoke("fix", "--write", "--verify", "--select", "GF201", str(script))
    assert script.read_text(encoding="utf-8") == NEEDS_DATA  # --verify: proven fixes only
    assert code == 1


def test_the_preview_runs_nothing_unless_asked(tmp_path: Path) -> None:
    model = write(tmp_path / "model.py", DATA_IN_FORWARD)
    code, out, _ = invoke("fix", *GF205, str(model))
    assert code == 1 and "+        return x * self.w.detach() + self.b" in out
    assert "rejected" not in out
    code, out, _ = invoke("fix", "--verify", *GF205, str(model))
    assert f"{model}:12:20: GF205 rejected: gradient lost" in out
    assert "+        return" not in out  # the rejected fix is not in the diff
    assert model.read_text(encoding="utf-8") == DATA_IN_FORWARD


def test_a_long_training_script_is_compared_over_its_first_steps(tmp_path: Path) -> None:
    forever = SILENT_CUT.replace("(a.sum()", "while True:\n    a = torch.tensor([w[0] * 2, w[1]])\n"
                                 "    (a.sum()")  # fmt: skip
    script = write(tmp_path / "train.py", forever)
    code, _, err = invoke("fix", "--write", "--timeout", "20", "--max-steps", "2",
                          "--select", "GF101", str(script))  # fmt: skip
    assert "stopped after 2 backward call(s) (--max-steps)" in err, err
    assert "torch.tensor(" not in script.read_text(encoding="utf-8")
    assert code == 0


BLOCK_TORCH = """
import importlib.abc, sys

class BlockTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError("No module named 'torch'", name="torch")
        return None

sys.meta_path.insert(0, BlockTorch())
from gradfix.cli import main
sys.argv = ["gradfix", *sys.argv[1:]]
main()
"""


def test_without_torch_write_falls_back_to_static_fixing_with_one_note(tmp_path: Path) -> None:
    model = write(tmp_path / "model.py", DATA_IN_FORWARD)
    env = dict(os.environ, GRADFIX_NO_CACHE="1")
    result = subprocess.run(
        [sys.executable, "-c", BLOCK_TORCH, "fix", "--write", *GF205, str(model)],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "self.w.detach()" in model.read_text(encoding="utf-8")
    notes = [line for line in result.stderr.splitlines() if line.startswith("note:")]
    assert len(notes) == 1 and "torch cannot be imported" in notes[0]
    assert result.stderr.splitlines()[-1] == "Fixed 1 finding in 1 file."
    verify = subprocess.run(
        [sys.executable, "-c", BLOCK_TORCH, "fix", "--write", "--verify", str(model)],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert verify.returncode == 2 and "needs torch" in verify.stderr


# A silent graph cut in each file: train.py's fix alone still leaves `v` (of other.py)
# without gradient, so it is proven only with other.py's fix in place.
OTHER = """import torch

v = torch.randn(2, requires_grad=True)


def scale(t):
    b = torch.tensor([v[0] * 3, v[1]])
    return b * t
"""
USES_OTHER = """import torch
from other import scale

w = torch.randn(2, requires_grad=True)
a = torch.tensor([w[0] * 2, w[1]])
(a.sum() + scale(w).sum()).backward()
"""


def test_fixes_of_a_project_are_verified_together_across_files(tmp_path: Path) -> None:
    write(tmp_path / "other.py", OTHER)
    train = write(tmp_path / "train.py", USES_OTHER)
    code, out, err = invoke("verify", "--select", "GF101", str(tmp_path))
    assert code == 0, out + err
    line = next(line for line in out.splitlines() if line.startswith(str(train)))
    assert "GF101 verified: verified together with the project's other fixes" in line
    assert "alone: gradient lost" in line
    code, _, err = invoke("fix", "--write", "--select", "GF101", str(tmp_path))
    assert code == 0, err
    assert "torch.tensor(" not in train.read_text(encoding="utf-8")


TWO_BUGS = """import torch

w = torch.tensor([1, 2], requires_grad=True)
v = torch.randn(2, requires_grad=True)
v.normal_()
(w * v).sum().backward()
"""


def test_a_change_is_proven_once_per_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each fix alone fails on the other bug; together they are proven, and that same
    change is what --write then checks again: it is not executed a second time."""
    from gradfix import proof

    runs: list[str] = []
    real = proof._prove

    def counting(path: str, source: str, single: object, limits: dict[str, object]) -> object:
        runs.append(single.description)  # type: ignore[attr-defined]
        return real(path, source, single, limits)  # type: ignore[arg-type]

    monkeypatch.setattr(proof, "_prove", counting)
    script = write(tmp_path / "train.py", TWO_BUGS)
    code, _, err = invoke("fix", "--write", "--verify", "--select", "GF105,GF201", str(script))
    assert code == 0, err
    assert err.count("verified together with the file's other fixes") == 2
    assert len(runs) == 3, runs  # two fixes alone, then both together: once
    assert "requires_grad=True" in script.read_text(encoding="utf-8")


def test_cmd_stops_each_process_of_both_versions_after_max_steps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A training loop that never ends, run by the user's command: each version's
    process ends after the same number of backward calls, and what ran is compared."""
    write(tmp_path / "train.py", FOREVER)
    monkeypatch.chdir(tmp_path)
    code, out, err = invoke("verify", "--cmd", f"{sys.executable} train.py", "--max-steps", "3",
                            "--timeout", "60", "train.py")  # fmt: skip
    assert code == 0, out + err
    assert "GF403 verified: " in out and "stopped after 3 backward call(s)" in out


FOREVER = """import torch

w = torch.randn(3, requires_grad=True)
running = 0
while True:
    loss = (w * w).sum()
    loss.backward()
    running += loss
"""


# `.data` on a decoder's logits: GF205 offers `.detach()` (the graph stays cut), GF408
# drops `.data`. Applied in one pass the first wins the node; GF408's fix, verified alone,
# then drops the `.detach()` in a second pass, and the whole is proven. Should the whole
# be refused, the fix verified alone is still written.
DECODER_DATA = """import torch
import torch.nn as nn
import torch.nn.functional as F


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.cell = nn.GRUCell(4, 4)
        self.out = nn.Linear(4, 5)

    def sample(self, h):
        logits = []
        for _ in range(3):
            h = self.cell(torch.zeros(2, 4), h)
            logits.append(self.out(h))
        logits = torch.stack(logits, 1).data
        return logits


torch.manual_seed(0)
encoder, head, decoder = nn.Linear(6, 4), nn.Linear(4, 3), Decoder()
features = encoder(torch.randn(2, 6))
logits = decoder.sample(features)
loss = F.cross_entropy(logits.reshape(-1, 5), torch.zeros(6, dtype=torch.long))
loss = loss + F.mse_loss(head(features), torch.zeros(2, 3))
loss.backward()
"""


def test_the_fixes_verified_alone_are_written_when_an_overlapping_one_spoils_the_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = write(tmp_path / "train.py", DECODER_DATA)
    code, _, err = invoke("fix", "--write", "--unsafe-fixes", "--select", "GF205,GF408",
                          str(script))  # fmt: skip
    assert (code, err.splitlines()[-1]) == (0, "Fixed 2 findings in 1 file."), err
    assert "        logits = torch.stack(logits, 1)\n" in script.read_text(encoding="utf-8")
    from gradfix import proof

    def refused(*_: object, **__: object) -> tuple[str, str, dict[str, object]]:
        return "rejected", "a forward result changed", {}

    monkeypatch.setattr(proof, "prove_change", refused)  # the whole, proven at the end
    script = write(tmp_path / "train.py", DECODER_DATA)
    code, _, err = invoke("fix", "--write", "--unsafe-fixes", "--select", "GF205,GF408",
                          str(script))  # fmt: skip
    assert "the accepted fixes together are rejected" in err, err
    assert "the fixes verified alone are applied" in err, err
    fixed = script.read_text(encoding="utf-8")
    assert "        logits = torch.stack(logits, 1)\n" in fixed
    assert code == 0, err


# GF302's fix of a reciprocal behind `where`: the function jumps at 0 (1/n against the 0
# branch), so no difference quotient there is a derivative (it grows fourfold per halved
# step). The element is left out and counted; the fix is proven on the others.
RECIPROCAL_WHERE = """import torch

n = torch.tensor([0.0, 3.0, 5.0], requires_grad=True)
r = torch.where(n != 0, 1.0 / n, torch.zeros_like(n))
r.sum().backward()
print(n.grad)
"""


def test_a_fix_at_a_discontinuity_is_written_and_the_element_left_out(tmp_path: Path) -> None:
    script = write(tmp_path / "recip.py", RECIPROCAL_WHERE)
    code, _, err = invoke("fix", "--write", str(script))
    assert "1.0 / torch.where(n != 0, n, torch.ones_like(n))" in script.read_text("utf-8")
    assert f"{script}:4:5: GF302 verified: " in err
    assert "1 element(s) left out where the forward has no derivative" in err
    assert code == 0


def test_a_wrong_fix_at_a_discontinuity_is_still_rejected_on_the_converged_elements(
    tmp_path: Path,
) -> None:
    """The element at the jump decides nothing; the others' converged quotients show that
    a reciprocal of a copy out of the graph loses the gradient (a copy, not a ``.detach()``:
    a stop-gradient a change adds may be meant, and is unverified)."""
    with_term = RECIPROCAL_WHERE.replace("r.sum()", "(r.sum() + n.sum())")
    bug = write(tmp_path / "bug.py", with_term)
    copied = with_term.replace("1.0 / n", "1.0 / n.new_tensor(n.tolist())")
    wrong = write(tmp_path / "wrong.py", copied)
    code, out, _ = invoke("verify", "--baseline", str(bug), str(wrong))
    assert code == 1 and "rejected" in out
    assert "at element 1" in out or "at element 2" in out


# GF110 only reports: its finding has no fix.
NO_FIX_STEP = """

def step(x, y):
    _, predicted = torch.max(Scale()(x), 0)
    loss = ((predicted.float() - y) ** 2).sum()
    loss.backward()
"""


def test_the_summary_says_why_each_finding_is_left(tmp_path: Path) -> None:
    """Not "No fixes available" when a fix existed and verification rejected it."""
    model = write(tmp_path / "model.py", DATA_IN_FORWARD + NO_FIX_STEP)
    code, _, err = invoke("fix", "--write", "--select", "GF205,GF110", "--unsafe-fixes",
                          str(model))  # fmt: skip
    assert code == 1
    assert err.splitlines()[-1] == (
        "No fixes applied (2 remaining: 1 fix rejected by verification, 1 finding without a fix)."
    )
    script = write(tmp_path / "needs_data.py", NEEDS_DATA)
    code, _, err = invoke("fix", "--verify", "--select", "GF201", str(script))
    assert code == 0  # a preview whose diff is empty
    assert err.splitlines()[-1] == (
        "No fixes would be applied (1 remaining: 1 fix unverified, applied only with "
        "--unsafe-fixes)."
    )


# GF103 and GF105 on one call, neither can run (no weights.pt): both unverified, both
# safe, so both are written, as without verification (the second in a second pass)
OVERLAPPING_UNVERIFIED = """import torch

data = torch.load("weights.pt")
x = torch.tensor([1, 2], requires_grad=True).double()
(x * data).sum().backward()
"""


def test_overlapping_unverified_fixes_are_all_written(tmp_path: Path) -> None:
    script = write(tmp_path / "train.py", OVERLAPPING_UNVERIFIED)
    code, _, err = invoke("fix", "--write", "--select", "GF103,GF105", str(script))
    assert "GF103 unverified" in err and "GF105 unverified" in err
    assert "x = torch.tensor([1.0, 2.0], dtype=torch.float64, requires_grad=True)\n" in (
        script.read_text(encoding="utf-8")
    )
    assert (code, err.splitlines()[-1]) == (0, "Fixed 2 findings in 1 file.")


# The outer GF101 gets a fix only once the inner `torch.tensor` is a `torch.stack`: no
# verdict in this run, so it is not written; the summary says so.
NESTED_CUT = """import torch

data = torch.load("weights.pt")
w = torch.randn(3, requires_grad=True)
a = torch.tensor([torch.tensor([w[0], w[1]]).sum(), w[2]])
(a * data).sum().backward()
"""


def test_a_fix_another_fix_makes_possible_waits_for_the_next_run(tmp_path: Path) -> None:
    script = write(tmp_path / "train.py", NESTED_CUT)
    code, _, err = invoke("fix", "--write", "--select", "GF101", "--unsafe-fixes", str(script))
    assert code == 1
    assert err.splitlines()[-1] == (
        "Fixed 1 finding in 1 file (1 remaining: 1 fix available only after another one, "
        "proven by the next run)."
    )
    code, _, err = invoke("fix", "--write", "--select", "GF101", "--unsafe-fixes", str(script))
    assert (code, err.splitlines()[-1]) == (0, "Fixed 1 finding in 1 file.")


# A two-file project: the model's file has two bugs (GF204's in-place residual, GF107's
# plain list of blocks); the flat script that imports it is how the user runs it.
MODEL = """import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.fc = nn.Linear(dim, dim)

    def forward(self, x):
        h = F.relu(self.fc(x))
        h += x  # residual
        return h


class Net(nn.Module):
    def __init__(self, dim=8, n_blocks=2):
        super().__init__()
        self.blocks = [Block(dim) for _ in range(n_blocks)]
        self.head = nn.Linear(dim, 1)

    def forward(self, x):
        for blk in self.blocks:
            x = blk(x)
        return self.head(x)
"""
FLAT_TRAIN = """import torch

from model import Net

torch.manual_seed(0)
net = Net()
optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
x, y = torch.randn(16, 8), torch.randn(16, 1)
for step in range(3):
    optimizer.zero_grad()
    loss = ((net(x) - y) ** 2).mean()
    loss.backward()
    optimizer.step()
print(round(loss.item(), 4))
"""


def two_bug_project(root: Path) -> Path:
    write(root / "train.py", FLAT_TRAIN)
    return write(root / "model.py", MODEL)


def test_a_module_is_proven_through_the_flat_script_that_imports_it(tmp_path: Path) -> None:
    """No ``__main__`` block: a script whose top level trains is the project's entry."""
    model = two_bug_project(tmp_path)
    code, _, err = invoke("fix", "--write", "--unsafe-fixes", str(model))
    assert "GF204 verified: forward results and gradients match" in err, err
    assert "GF107 verified: verified together with the file's other fixes" in err, err
    assert (code, err.splitlines()[-1]) == (0, "Fixed 2 findings in 1 file.")


def test_a_fix_that_spoils_the_joint_proof_is_left_out_and_the_others_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model file's two fixes refused together (the joint proof is made to fail here),
    none verified alone (no script runs the file): GF107, declared to change what trains,
    is left out first, and GF204's fix is written."""
    from gradfix import proof

    model = write(tmp_path / "model.py", MODEL)
    proven = proof.prove_change

    def refused_together(path: str, original: str, fixed: str, **kwargs: object) -> object:
        if "nn.ModuleList" in fixed and "h = h + x" in fixed:
            return "rejected", "forward changed: the result of backward call #1 ...", {}
        return proven(path, original, fixed, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(proof, "prove_change", refused_together)
    code, _, err = invoke("fix", "--write", "--unsafe-fixes", str(model))
    assert "the accepted fixes together are rejected" in err, err
    assert "the accepted fixes but GF107 at line 20 are applied together" in err, err
    fixed = model.read_text(encoding="utf-8")
    assert "h = h + x  # residual" in fixed
    assert "self.blocks = [Block(dim) for _ in range(n_blocks)]" in fixed
    assert code == 1  # GF107's finding stays
