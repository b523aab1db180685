"""Tests of the execution oracle (gradfix.verify).

The first half runs real BEFORE/AFTER pairs through subprocesses (one fork server per test
session, so each pair costs a fraction of a second after the first); the second half feeds
hand-built traces to the pure comparison.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gradfix.registry import fix_intent
from gradfix.verify import Verdict, compare_traces, plan_fd, verify_files, verify_sources
from gradfix.verify.intent import FixIntent

TIMEOUT = 30.0

# --------------------------------------------------------------------------- pairs
# Seed 000, "tensor from tensors": torch.tensor() copies values and cuts the graph.
TENSOR_FROM_TENSORS = """\
import torch

a = torch.nn.Parameter(torch.rand(5))
a0 = a[0] * 2
a1 = torch.log(a[1] + 1)
A1 = torch.tensor([a0, a1])
A1.sum().backward()
"""
TENSOR_FROM_TENSORS_FIX = TENSOR_FROM_TENSORS.replace(
    "torch.tensor([a0, a1])", "torch.stack([a0, a1])"
)
TENSOR_FROM_TENSORS_DOUBLED = TENSOR_FROM_TENSORS.replace(
    "torch.tensor([a0, a1])", "torch.stack([a0, a1]) * 2"
)

# Seed 000, the R1/R2/k normalisation: `param[2] = param[0] / param[1]` in place.
SELF_INDEX_ASSIGN = """\
import torch


class Example(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.paramn_ = torch.nn.Parameter(torch.rand(2), requires_grad=True)
        self.eta_estimator = torch.nn.Sequential(torch.nn.Linear(3, 1))
        self.eta_estimator.train(False)
        self.param_max = torch.tensor([2, 4, 2])
        self.param_min = torch.tensor([1, 2, 0])

    @property
    def Param(self):
        paramn = torch.zeros([3])
        paramn[0] = self.paramn_[0]
        paramn[1] = self.paramn_[1]
        param = paramn * (self.param_max - self.param_min) + self.param_min
        param[2] = param[0] / param[1]
        paramn = (param - self.param_min) / (self.param_max - self.param_min)
        return paramn

    @property
    def eta(self):
        return self.eta_estimator(self.Param)


torch.manual_seed(0)
test = Example()
print(test.eta)
test.Param.sum().backward()
print(test.paramn_.grad)
"""
SELF_INDEX_ASSIGN_FIX = SELF_INDEX_ASSIGN.replace(
    "param[2] = param[0] / param[1]",
    "param = torch.stack([param[0], param[1], param[0] / param[1]])",
)
SELF_INDEX_ASSIGN_DETACH = SELF_INDEX_ASSIGN.replace(
    "param[2] = param[0] / param[1]", "param[2] = (param[0] / param[1]).detach()"
)

# Seed 004, gamma correction: the masked-out sqrt branch poisons the gradient at x = 0.
GAMMA = """\
import torch


def loss_function(x):
    mask = (x < 0.003).float()
    gamma_x = mask * 12.9 * x + (1 - mask) * (x ** 0.5)
    loss = torch.mean((x - gamma_x) ** 2)
    return loss


x = torch.tensor([0, 0.0025, 0.5, 0.8, 1], requires_grad=True)
loss = loss_function(x)
loss.backward()
print(x.grad)
"""
GAMMA_BLEND = "gamma_x = mask * 12.9 * x + (1 - mask) * (x ** 0.5)"
GAMMA_FIX = GAMMA.replace(
    GAMMA_BLEND,
    "gamma_x = torch.where(x < 0.003, 12.9 * x, "
    "torch.where(x < 0.003, torch.ones_like(x), x) ** 0.5)",
)
GAMMA_SINGLE_WHERE = GAMMA.replace(
    GAMMA_BLEND, "gamma_x = torch.where(x < 0.003, 12.9 * x, x ** 0.5)"
)

# In-place initialisation of a leaf: raises before any forward result exists.
LEAF_INPLACE = """\
import torch

torch.manual_seed(0)
w = torch.randn(3, requires_grad=True)
w.normal_()
loss = (w * 2).sum()
loss.backward()
"""
LEAF_INPLACE_FIX = LEAF_INPLACE.replace("w.normal_()", "with torch.no_grad():\n    w.normal_()")
# Same forward value, but half of it is detached: the gradient is 1 instead of 2.
LEAF_INPLACE_DETACHED = LEAF_INPLACE_FIX.replace(
    "loss = (w * 2).sum()", "loss = (w + w.detach()).sum()"
)

TRAINING_LOOP = """\
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.fc2 = nn.Linear(8, 1)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))


torch.manual_seed(0)
model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(16, 4)
y = torch.randn(16, 1)
for step in range(3):
    opt.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
final = model(x).detach()
"""

# Backward twice through a freed graph; the second call raises.
BACKWARD_TWICE = """\
import torch

x = torch.tensor([1.0, 2.0], requires_grad=True)
y = x.exp().sum()
y.backward()
y.backward()
"""
BACKWARD_TWICE_FIX = BACKWARD_TWICE.replace(
    "y.backward()\ny.backward()", "y.backward(retain_graph=True)\ny.backward()"
)

# GF302: where(x > 0, sqrt(x), 0) has a nan gradient at x = 0, where sqrt has a kink.
WHERE_SQRT = """\
import torch

x = torch.tensor([0.0, 1.0, 4.0], requires_grad=True)
y = torch.where(x > 0, torch.sqrt(x), torch.zeros_like(x)).sum()
y.backward()
"""
WHERE_SQRT_FIX = WHERE_SQRT.replace(
    "torch.sqrt(x)", "torch.sqrt(torch.where(x > 0, x, torch.ones_like(x)))"
)
# Same forward, but a gradient of -5 at x = 0, outside sqrt's slopes [0, +inf) there.
WHERE_SQRT_WRONG = WHERE_SQRT_FIX.replace(
    "y = torch.where(", "y = -5 * ((x - x.detach()) * (x == 0)).sum() + torch.where("
)

# Parameters of nn.Linear are initialised in place after their creation: the finite
# differences must perturb them at their first use in the graph, not when created.
LINEAR_TENSOR_FROM_TENSORS = """\
import torch
from torch import nn

torch.manual_seed(0)
lin = nn.Linear(3, 2)
x = torch.randn(4, 3)
out = lin(x)
vals = torch.tensor([out[0, 0], out[1, 1]])
vals.sum().backward()
"""
LINEAR_STACK = LINEAR_TENSOR_FROM_TENSORS.replace(
    "torch.tensor([out[0, 0], out[1, 1]])", "torch.stack([out[0, 0], out[1, 1]])"
)
LINEAR_STACK_DETACHED = LINEAR_TENSOR_FROM_TENSORS.replace(
    "torch.tensor([out[0, 0], out[1, 1]])", "torch.stack([out[0, 0], out[1, 1].detach()])"
)

# A training loop whose every step has a nan gradient at w[0]: the estimate at step m must
# perturb w as the optimizer left it, not as it was created.
MASKED_SQRT_LOOP = """\
import torch

w = torch.tensor([0.0, 0.5, 1.5], requires_grad=True)
opt = torch.optim.SGD([w], lr=0.5)
for step in range(3):
    opt.zero_grad()
    mask = (w < 0.003).float()
    g = mask * 12.9 * w + (1 - mask) * (w ** 0.5)
    loss = ((w - g) ** 2).sum()
    loss.backward()
    with torch.no_grad():
        w.grad.nan_to_num_(0.0)
    opt.step()
"""
MASKED_SQRT_LOOP_FIX = MASKED_SQRT_LOOP.replace(
    "g = mask * 12.9 * w + (1 - mask) * (w ** 0.5)",
    "g = torch.where(w < 0.003, 12.9 * w, torch.where(w < 0.003, torch.ones_like(w), w) ** 0.5)",
)

# A *silent* graph cut: torch.tensor() copies values, the script still runs and w.grad is
# finite, but it misses the path through `scale` (true d loss / d w[1] is 1 + 2 w[1], not 1).
SILENT_CUT = """\
import torch

w = torch.nn.Parameter(torch.rand(3))
scale = torch.tensor([w[0] * 2, w[1] ** 2])  # constant copy: graph cut here
loss = (w.sum() + (scale * torch.arange(2.)).sum())
loss.backward()
"""
SILENT_CUT_COPY = "torch.tensor([w[0] * 2, w[1] ** 2])"
SILENT_CUT_FIX = SILENT_CUT.replace(SILENT_CUT_COPY, "torch.stack([w[0] * 2, w[1] ** 2])")
SILENT_CUT_DOUBLED = SILENT_CUT_FIX.replace("loss = (w.sum()", "loss = 2 * (w.sum()")
# Same forward as the fix, but half of the restored path is detached: 1 + w[1], neither
# before's 1 nor the true 1 + 2 w[1].
SILENT_CUT_HALF = SILENT_CUT.replace(
    SILENT_CUT_COPY, "torch.stack([w[0] * 2, w[1] * w[1].detach()])"
)
# The fix as BEFORE (correct gradient), and an AFTER that cuts it: the finite differences
# side with BEFORE's autograd gradient.
SILENT_CUT_FIX_DETACHED = SILENT_CUT.replace(
    SILENT_CUT_COPY, "torch.stack([w[0] * 2, (w[1] ** 2).detach()])"
)
# An intentional detach (a stop-gradient) that the rewrite keeps as it is.
INTENTIONAL_DETACH = SILENT_CUT_FIX.replace("loss = (w.sum()", "loss = ((w * w.detach()).sum()")
# In a training loop the incomplete gradient moves before's w elsewhere: from step 2 on
# the fix is checked against its own finite differences.
SILENT_CUT_LOOP = """\
import torch

w = torch.nn.Parameter(torch.tensor([0.5, 1.5, -0.5]))
opt = torch.optim.SGD([w], lr=0.1)
for step in range(3):
    opt.zero_grad()
    scale = torch.tensor([w[0] * 2, w[1] ** 2])
    loss = (w ** 2).sum() + (scale * torch.arange(2.)).sum()
    loss.backward()
    opt.step()
"""
SILENT_CUT_LOOP_FIX = SILENT_CUT_LOOP.replace(SILENT_CUT_COPY, "torch.stack([w[0] * 2, w[1] ** 2])")


def verify(before: str, after: str, **options: object) -> Verdict:
    options.setdefault("timeout", TIMEOUT)
    return verify_sources(before, after, **options)  # type: ignore[arg-type]


# ------------------------------------------------------------------ subprocess tests
def test_tensor_from_tensors_fix_is_verified_by_finite_differences() -> None:
    verdict = verify(TENSOR_FROM_TENSORS, TENSOR_FROM_TENSORS_FIX)
    assert verdict.status == "verified", verdict.reason
    evidence = verdict.evidence
    assert evidence["fd_used"] is True
    assert evidence["finite_difference"]["values_compared"] == 5
    assert evidence["backward_events"] == {"before": 1, "after": 1}
    assert evidence["leaves_compared"] == [0]
    assert evidence["before_outcome"]["type"] == "RuntimeError"
    json.dumps(verdict.to_dict())  # JSON-safe


def test_changed_forward_is_rejected() -> None:
    verdict = verify(TENSOR_FROM_TENSORS, TENSOR_FROM_TENSORS_DOUBLED)
    assert verdict.status == "rejected"
    assert "forward" in verdict.reason


def test_self_index_assign_stack_fix_is_verified() -> None:
    verdict = verify(SELF_INDEX_ASSIGN, SELF_INDEX_ASSIGN_FIX)
    assert verdict.status == "verified", verdict.reason
    # paramn_ and the Linear's weight and bias (which the root does not reach: zero).
    assert verdict.evidence["leaves_compared"] == [0, 1, 2]


def test_detach_workaround_is_rejected() -> None:
    verdict = verify(SELF_INDEX_ASSIGN, SELF_INDEX_ASSIGN_DETACH)
    assert verdict.status == "rejected"
    assert "gradient" in verdict.reason and "leaf 0" in verdict.reason


def test_silent_graph_cut_fix_is_verified_against_finite_differences() -> None:
    verdict = verify(SILENT_CUT, SILENT_CUT_FIX)
    assert verdict.status == "verified", verdict.reason
    assert "(a silent graph cut) at 1 element(s): compared against finite differences" in (
        verdict.reason
    )
    evidence = verdict.evidence
    assert evidence["fd_used"] is True
    [cut] = evidence["silent_graph_cuts"]
    assert (cut["event"], cut["leaf"], cut["element"]) == (0, 0, 1)
    assert cut["before_autograd"] == pytest.approx(1.0)
    assert cut["after"] == pytest.approx(cut["finite_difference"], rel=1e-3)
    assert cut["after"] > 1.5  # 1 + 2 w[1]
    [note] = evidence["notes"]
    assert (
        "before's autograd gradient differs from finite differences of its forward "
        "(a silent graph cut): compared against finite differences"
    ) in note
    json.dumps(verdict.to_dict())


def test_silent_graph_cut_fix_with_changed_forward_is_rejected() -> None:
    verdict = verify(SILENT_CUT, SILENT_CUT_DOUBLED)
    assert verdict.status == "rejected"
    assert verdict.reason.startswith("forward changed")


def test_silent_graph_cut_kept_as_it_is_is_verified_without_finite_differences() -> None:
    verdict = verify(SILENT_CUT, SILENT_CUT)
    assert verdict.status == "verified", verdict.reason
    assert verdict.evidence["fd_used"] is False
    assert verdict.evidence["silent_graph_cuts"] == []


def test_intentional_detach_kept_by_the_fix_needs_no_finite_differences() -> None:
    verdict = verify(INTENTIONAL_DETACH, INTENTIONAL_DETACH)
    assert verdict.status == "verified", verdict.reason
    assert verdict.evidence["fd_used"] is False


def test_silent_graph_cut_fix_with_a_wrong_gradient_is_rejected() -> None:
    verdict = verify(SILENT_CUT, SILENT_CUT_HALF)  # neither before's nor the true gradient
    assert verdict.status == "rejected"
    assert verdict.reason.startswith("gradient wrong:")
    assert "finite-difference derivative of before's forward" in verdict.reason
    assert "before's autograd gives 1;" in verdict.reason


def test_changed_gradient_that_finite_differences_confirm_in_before_is_rejected() -> None:
    verdict = verify(SILENT_CUT_FIX, SILENT_CUT_FIX_DETACHED)
    assert verdict.status == "rejected"
    assert verdict.reason.startswith("gradient changed:")
    assert "agrees with before's autograd" in verdict.reason


def test_silent_graph_cut_in_a_training_loop_parts_the_trajectories() -> None:
    verdict = verify(SILENT_CUT_LOOP, SILENT_CUT_LOOP_FIX)
    assert verdict.status == "verified", verdict.reason
    assert "(a silent graph cut)" in verdict.reason
    assert "parts from the fix's at #2" in verdict.reason
    assert verdict.evidence["events_self_checked"] == 2


def test_unchanged_after_that_still_raises_is_rejected() -> None:
    verdict = verify(SELF_INDEX_ASSIGN, SELF_INDEX_ASSIGN)
    assert verdict.status == "rejected"
    # both versions fail the same way, but in backward: the fix's own business, never
    # "blocked by" another bug
    assert verdict.reason.startswith("after: backward call #1 at line 31 raised RuntimeError")
    assert "\n" not in verdict.reason


def test_gamma_double_where_is_verified_with_one_sided_difference() -> None:
    verdict = verify(GAMMA, GAMMA_FIX)
    assert verdict.status == "verified", verdict.reason
    fd = verdict.evidence["finite_difference"]
    # Only x[0] had a nan gradient; x - h < 0 makes the central estimate nan there.
    assert fd["values_compared"] == 1
    assert [(e["element"], e["method"]) for e in fd["one_sided"]] == [(0, "one-sided+")]
    assert verdict.evidence["gradient"]["values_compared"] == 4


def test_after_with_nan_gradient_is_rejected() -> None:
    verdict = verify(GAMMA, GAMMA_SINGLE_WHERE)
    assert verdict.status == "rejected"
    assert "non-finite gradient (nan) at element 0" in verdict.reason


def test_guarded_where_is_accepted_at_the_kink_between_the_one_sided_slopes() -> None:
    verdict = verify(WHERE_SQRT, WHERE_SQRT_FIX)
    assert verdict.status == "verified", verdict.reason
    kinks = verdict.evidence["finite_difference"]["kinks"]
    assert [(k["element"], k["interval"][0]) for k in kinks] == [(0, 0.0)]
    assert kinks[0]["interval"][1] > 10  # sqrt's right slope grows as the step shrinks
    wrong = verify(WHERE_SQRT, WHERE_SQRT_WRONG)  # same forward, gradient -5 at x = 0
    assert wrong.status == "rejected"
    assert "kink" in wrong.reason


def test_leaf_inplace_fix_is_checked_against_its_own_finite_differences() -> None:
    verdict = verify(LEAF_INPLACE, LEAF_INPLACE_FIX)
    assert verdict.status == "verified", verdict.reason
    assert "before raised RuntimeError at line 5 before any forward result" in verdict.reason
    assert "own finite differences" in verdict.reason
    assert verdict.evidence["events_self_checked"] == 1


def test_leaf_inplace_fix_with_detached_branch_is_rejected() -> None:
    verdict = verify(LEAF_INPLACE, LEAF_INPLACE_DETACHED)
    assert verdict.status == "rejected"
    assert "finite-difference derivative of the fix's own forward" in verdict.reason


def test_module_parameters_are_perturbed_after_their_initialisation() -> None:
    verdict = verify(LINEAR_TENSOR_FROM_TENSORS, LINEAR_STACK)
    assert verdict.status == "verified", verdict.reason
    assert verdict.evidence["finite_difference"]["values_compared"] == 8  # weight + bias
    detached = verify(LINEAR_TENSOR_FROM_TENSORS, LINEAR_STACK_DETACHED)
    assert detached.status == "rejected"
    assert "leaf 0 'lin.weight' (nn.Parameter at line 5)" in detached.reason


def test_nan_gradients_in_a_training_loop_are_estimated_per_step() -> None:
    verdict = verify(MASKED_SQRT_LOOP, MASKED_SQRT_LOOP_FIX)
    assert verdict.status == "verified", verdict.reason
    assert verdict.evidence["events_compared"] == 3
    one_sided = verdict.evidence["finite_difference"]["one_sided"]
    assert [(e["event"], e["element"]) for e in one_sided] == [(0, 0), (1, 0), (2, 0)]


def test_finite_difference_budget_is_capped_and_said_so() -> None:
    before = TENSOR_FROM_TENSORS.replace("torch.rand(5)", "torch.rand(40)")
    after = TENSOR_FROM_TENSORS_FIX.replace("torch.rand(5)", "torch.rand(40)")
    verdict = verify(before, after, fd_budget=4)
    assert verdict.status == "verified", verdict.reason
    fd = verdict.evidence["finite_difference"]
    assert fd["capped"] is True and "capped" in verdict.reason
    assert (fd["values_compared"], fd["uncompared"]) == (4, 36)


def test_backward_twice_fix_is_verified() -> None:
    verdict = verify(BACKWARD_TWICE, BACKWARD_TWICE_FIX)
    assert verdict.status == "verified", verdict.reason
    assert verdict.evidence["backward_events"] == {"before": 2, "after": 2}


def test_training_loop_is_verified_against_itself() -> None:
    verdict = verify(TRAINING_LOOP, TRAINING_LOOP)
    assert verdict.status == "verified", verdict.reason
    evidence = verdict.evidence
    assert evidence["backward_events"] == {"before": 3, "after": 3}
    assert evidence["leaves_compared"] == [0, 1, 2, 3]
    assert evidence["fd_used"] is False
    assert "final" in evidence["globals_compared"]


def test_missing_module_is_unverified() -> None:
    source = "import nonexistent_pkg\n"
    verdict = verify(source, source)
    assert verdict.status == "unverified"
    assert "ModuleNotFoundError" in verdict.reason


def test_cuda_is_unverified() -> None:
    source = "import torch\nx = torch.zeros(3, device='cuda', requires_grad=True)\n"
    verdict = verify(source, source)
    assert verdict.status == "unverified"
    assert "CUDA" in verdict.reason


def test_infinite_loop_times_out_as_unverified() -> None:
    verdict = verify("while True:\n    pass\n", "x = 1\n", timeout=3)
    assert verdict.status == "unverified"
    assert "timeout" in verdict.reason


# GF205 rewrites its `.data` read in forward to `.detach()` (also in test_fix_verifies.py).
DATA_IN_FORWARD = (Path(__file__).parents[1] / "data" / "data_in_forward.py").read_text(
    encoding="utf-8"
)


def test_data_read_replaced_by_detach_is_rejected_the_layer_still_never_trains() -> None:
    detached = DATA_IN_FORWARD.replace("self.w.data", "self.w.detach()")
    verdict = verify(DATA_IN_FORWARD, detached)
    assert verdict.status == "rejected", verdict.reason
    assert "gradient lost" in verdict.reason and "leaf 0 (nn.Parameter at line 8)" in (
        verdict.reason
    )


# The same cut on a weight torch made: nn.Linear's, read through `.data` in forward.
LINEAR_DATA_IN_FORWARD = """import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 2)

    def forward(self, x):
        return x @ self.lin.weight.data.t() + self.lin.bias


torch.manual_seed(0)
model = Net()
loss = (model(torch.randn(4, 3)) ** 2).sum()
loss.backward()
"""
LINEAR_DETACHED = LINEAR_DATA_IN_FORWARD.replace(".weight.data.t()", ".weight.detach().t()")
LINEAR_RECONNECTED = LINEAR_DATA_IN_FORWARD.replace(".weight.data.t()", ".weight.t()")


def test_a_torch_made_weight_left_cut_by_a_fix_that_must_restore_it_is_rejected() -> None:
    verdict = verify(LINEAR_DATA_IN_FORWARD, LINEAR_DETACHED, rules=("GF205",))
    assert verdict.status == "rejected", verdict.reason
    assert verdict.reason.startswith(
        "gradient lost: leaf 0 'model.lin.weight' (nn.Parameter at line 8): backward call #1"
    )
    assert verdict.evidence["torch_made_weights_checked"] is True


def test_a_torch_made_weight_reconnected_by_the_fix_is_verified() -> None:
    verdict = verify(LINEAR_DATA_IN_FORWARD, LINEAR_RECONNECTED, rules=("GF205",))
    assert verdict.status == "verified", verdict.reason
    assert "leaves compared: #0 'model.lin.weight' (line 8), #1 'model.lin.bias'" in (
        verdict.reason
    )


def test_a_fix_not_meant_to_restore_a_gradient_keeps_a_torch_made_weight_frozen() -> None:
    verdict = verify(LINEAR_DATA_IN_FORWARD, LINEAR_DETACHED, rules=("GF104",))
    assert verdict.status == "verified", verdict.reason
    assert (
        "not compared: #0 'model.lin.weight' (line 8) (no gradient in either version; "
        "made by torch, not declared, and the fix of GF104 is not meant to give it one)"
    ) in verdict.reason


def test_a_parameter_frozen_with_requires_grad_false_is_not_a_lost_gradient() -> None:
    frozen = DATA_IN_FORWARD.replace(
        "loss = (Scale()(torch.randn(3)) ** 2).sum()",
        "scale = Scale()\nscale.w.requires_grad_(False)\nloss = (scale(torch.randn(3)) ** 2).sum()",
    )
    verdict = verify(frozen, frozen.replace("self.w.data", "self.w.detach()"), rules=("GF205",))
    assert verdict.status == "verified", verdict.reason
    assert (
        "not compared: #0 'scale.w' (line 8) (no gradient in either version; "
        "frozen (requires_grad is False at the call))"
    ) in verdict.reason


TRAINING_FOREVER = """import torch

w = torch.randn(3, requires_grad=True)
while True:
    loss = torch.tensor([w[0] * 2, w[1]]).sum() + (w * w).sum()
    loss.backward()
    with torch.no_grad():
        w -= 0.01 * w.grad
        w.grad = None
"""


def test_max_steps_stops_both_versions_after_the_same_number_of_backward_calls() -> None:
    fixed = TRAINING_FOREVER.replace("torch.tensor([", "torch.stack([")
    verdict = verify(TRAINING_FOREVER, fixed, timeout=20, max_steps=3)
    assert verdict.status == "verified", verdict.reason
    assert verdict.evidence["backward_events"] == {"before": 3, "after": 3}
    assert "both versions stopped after 3 backward call(s) (--max-steps)" in verdict.reason


def test_the_script_reads_its_project_files_and_writes_nowhere_in_it(tmp_path: Path) -> None:
    import torch

    (tmp_path / "data").mkdir()
    torch.save(torch.arange(3.0), tmp_path / "data" / "train.pt")
    (tmp_path / "data" / "model.pt").write_bytes(b"old model")
    (tmp_path / "data" / "log.txt").write_text("kept\n", encoding="utf-8")
    script = """import torch
from pathlib import Path

x = torch.load("data/train.pt")
w = torch.randn(3, requires_grad=True)
loss = torch.tensor([w[0] * x[1], w[1]]).sum() + (w * x).sum()
loss.backward()
torch.save(w, "data/model.pt")
with open(Path(__file__).parent / "data" / "log.txt", "a") as log:
    log.write("appended\\n")
Path("checkpoint.pt").write_bytes(b"new")
"""
    (tmp_path / "train.py").write_text(script, encoding="utf-8")
    fixed = script.replace("torch.tensor([", "torch.stack([")
    verdict = verify(script, fixed, filename="train.py", source_dir=str(tmp_path))
    assert verdict.status == "verified", verdict.reason
    assert (tmp_path / "data" / "model.pt").read_bytes() == b"old model"
    assert (tmp_path / "data" / "log.txt").read_text(encoding="utf-8") == "kept\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "train.py"]


def test_a_write_by_absolute_path_into_the_project_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "out.txt"
    script = f"open({str(target)!r}, 'w').write('x')\n"
    verdict = verify(script, script, filename="s.py", source_dir=str(tmp_path))
    assert "PermissionError" in verdict.reason and "writes nowhere in it" in verdict.reason
    assert not target.exists()


def test_after_that_does_not_compile_is_rejected() -> None:
    verdict = verify(TENSOR_FROM_TENSORS, "x = (\n")
    assert verdict.status == "rejected"
    assert "does not compile" in verdict.reason


def test_verify_files_reads_without_writing(tmp_path: Path) -> None:
    before, after = tmp_path / "case.before.py", tmp_path / "case.after.py"
    before.write_text(GAMMA)
    after.write_text(GAMMA_FIX)
    stamps = [(p.stat().st_mtime_ns, p.read_text()) for p in (before, after)]
    verdict = verify_files(before, after, timeout=TIMEOUT)
    assert verdict.status == "verified", verdict.reason
    assert verdict.evidence["filename"] == "case.before.py"
    assert [(p.stat().st_mtime_ns, p.read_text()) for p in (before, after)] == stamps
    assert sorted(p.name for p in tmp_path.iterdir()) == ["case.after.py", "case.before.py"]


def test_importing_the_package_does_not_import_torch() -> None:
    src = Path(__file__).resolve().parents[2] / "src"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(src), os.environ.get("PYTHONPATH", "")]))
    code = "import sys, gradfix.verify; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=60)


# --------------------------------------------------------- hand-built traces
OK = {"status": "ok"}


def tensor(
    values: list[float], shape: list[int] | None = None, dtype: str = "float32"
) -> dict[str, object]:
    return {
        "shape": [len(values)] if shape is None else shape,
        "dtype": dtype,
        "numel": len(values),
        "truncated": False,
        "values": [v if math.isfinite(v) else str(v) for v in values],
    }


def scalar(value: float) -> dict[str, object]:
    return tensor([value], shape=[])


def leaf(shape: tuple[int, ...] = (2,)) -> dict[str, object]:
    return {
        "index": 0,
        "shape": list(shape),
        "dtype": "float32",
        "origin": "torch.randn",
        "line": 3,
    }


def event(
    root: float,
    grads: dict[int, dict[str, object] | None],
    *,
    error: str | None = None,
    line: int = 5,
) -> dict[str, object]:
    return {
        "index": 0,
        "kind": "backward",
        "line": line,
        "roots": [scalar(root)],
        "objective": root,
        "grads": {} if error else {str(k): g for k, g in grads.items()},
        "error": {"type": "RuntimeError", "message": error} if error else None,
    }


def trace(
    *events: dict[str, object],
    leaves: int = 1,
    outcome: dict[str, object] = OK,
    tensors: dict[str, object] | None = None,
) -> dict[str, object]:
    return {
        "outcome": outcome,
        "leaves": [leaf() for _ in range(leaves)],
        "events": list(events),
        "event_count": len(events),
        "events_truncated": False,
        "globals": tensors or {},
        "leaf_globals": [],
        "seed": 0,
    }


def fd_entry(
    event_index: int, leaf_index: int, values: list[float], noise: float = 0.0, unused: bool = False
) -> dict[str, object]:
    return {
        "event": event_index,
        "leaf": leaf_index,
        "numel": len(values),
        "requested": len(values),
        "unused": unused,
        "error": None,
        "indices": [] if unused else list(range(len(values))),
        "values": [] if unused else [v if math.isfinite(v) else str(v) for v in values],
        "methods": [] if unused else ["central"] * len(values),
        "noise": [] if unused else [noise] * len(values),
    }


def without_claims(plan: dict[str, list[dict[str, object]]]) -> dict[str, list[dict[str, object]]]:
    """A plan without the gradients its targets are to judge (``claims``)."""
    return {
        source: [{k: v for k, v in target.items() if k != "claims"} for target in targets]
        for source, targets in plan.items()
    }


def fd(*entries: dict[str, object], probe: dict[str, float] | None = None) -> dict[str, object]:
    return {
        "entries": list(entries),
        "evaluations": 2 * len(entries),
        "capped": False,
        "probe_objectives": probe or {},
    }


RAISED = trace(
    event(1.0, {}, error="element 0 of tensors does not require grad"),
    outcome={
        "status": "error",
        "type": "RuntimeError",
        "message": "element 0",
        "line": 5,
        "category": "code",
    },
)


@pytest.mark.parametrize(
    ("after_value", "status"),
    [
        (1.0 + 1.0e-4, "verified"),  # |diff| <= 1e-5 + 1e-4 * 1.0
        (1.0 + 1.2e-4, "rejected"),
    ],
)
def test_gradient_tolerance_edge(after_value: float, status: str) -> None:
    before = trace(event(3.0, {0: tensor([1.0, -2.0])}))
    after = trace(event(3.0, {0: tensor([after_value, -2.0])}))
    verdict = compare_traces(before, after)
    assert verdict.status == status, verdict.reason
    assert verdict.evidence["tolerances"]["gradient"] == {"rtol": 1e-4, "atol": 1e-5}


@pytest.mark.parametrize(
    ("after_root", "status"),
    [
        (10.0 + 0.9e-4, "verified"),  # |diff| <= 1e-6 + 1e-5 * 10
        (10.0 + 1.2e-4, "rejected"),
    ],
)
def test_forward_tolerance_edge(after_root: float, status: str) -> None:
    grads = {0: tensor([1.0, 1.0])}
    verdict = compare_traces(trace(event(10.0, grads)), trace(event(after_root, grads)))
    assert verdict.status == status, verdict.reason
    if status == "rejected":
        assert verdict.reason.startswith("forward changed")


def test_nan_forward_in_before_is_not_compared() -> None:
    before = trace(event(math.nan, {0: tensor([math.nan, 1.0])}))
    after = trace(event(0.5, {0: tensor([0.0, 1.0])}))
    fix = {"before": fd(fd_entry(0, 0, [0.0, 1.0]))}
    verdict = compare_traces(before, after, fix)
    assert verdict.status == "verified", verdict.reason
    assert verdict.evidence["forward"]["values_compared"] == 0


@pytest.mark.parametrize(
    ("after_value", "noise", "status"),
    [
        (2.02, 0.0, "verified"),  # |diff| <= 1e-3 + 1e-2 * 2.0
        (2.03, 0.0, "rejected"),  # float64 agrees with float32's quotient
        (2.03, 0.02, "verified"),  # the estimate's rounding-noise bound widens atol
    ],
)
def test_finite_difference_tolerance_edge(after_value: float, noise: float, status: str) -> None:
    after = trace(event(1.0, {0: tensor([after_value, 0.0])}))
    entry = dict(fd_entry(0, 0, [2.0, 0.0], noise), precise=[[0, 2.0, 1e-9, 1e-9]])
    verdict = compare_traces(RAISED, after, {"before": dict(fd(entry), confirmed=True)})
    assert verdict.status == status, verdict.reason
    assert verdict.evidence["fd_used"] is True


@pytest.mark.parametrize(
    ("float64", "status", "said"),
    [
        (None, "unverified", "to be confirmed in float64"),  # asked for, not yet there
        (2.5, "verified", "checked against finite differences"),  # float32 rounding
        (2.0, "rejected", "in float64 it is 2"),  # a converged, consistent disagreement
        (3.0, "unverified", "do not agree between precisions"),  # decides nothing
    ],
)
def test_a_float32_disagreement_is_decided_in_float64(
    float64: float | None, status: str, said: str
) -> None:
    """Finite differences of a float32 program can miss by more than the tolerance (deep
    networks, kinks inside the step): a disagreement rejects only when the float64
    replay's quotient agrees with float32's."""
    after = trace(event(1.0, {0: tensor([2.5, 0.0])}))
    entry = fd_entry(0, 0, [2.0, 0.0])
    if float64 is None:
        verdict = compare_traces(RAISED, after, {"before": fd(entry)})
        assert verdict.evidence["confirm"] == [
            {"source": "before", "event": 0, "leaf": 0, "elements": [0], "precise": True}
        ]
    else:
        entry = dict(entry, precise=[[0, float64, 1e-9, 1e-9]])
        verdict = compare_traces(RAISED, after, {"before": dict(fd(entry), confirmed=True)})
        assert "confirm" not in verdict.evidence
    assert verdict.status == status, verdict.reason
    assert said in verdict.reason


def test_every_float32_disagreement_is_asked_of_float64_in_one_round() -> None:
    """Asked one at a time, the second disagreement has no float64 estimate once the
    first is confirmed, and the fix stays unverified: all are asked for together."""
    after = trace(event(1.0, {0: tensor([2.5, 0.0, 4.5])}))
    entry = fd_entry(0, 0, [2.0, 0.0, 4.0])
    verdict = compare_traces(RAISED, after, {"before": fd(entry)})
    assert verdict.status == "unverified" and "to be confirmed in float64" in verdict.reason
    assert verdict.evidence["confirm"] == [
        {"source": "before", "event": 0, "leaf": 0, "elements": [0, 2], "precise": True}
    ]
    both = dict(entry, precise=[[0, 2.5, 1e-9, 1e-9], [2, 4.5, 1e-9, 1e-9]])
    verdict = compare_traces(RAISED, after, {"before": dict(fd(both), confirmed=True)})
    assert verdict.status == "verified", verdict.reason


def test_undefined_estimate_is_skipped_but_after_must_be_finite() -> None:
    entry = fd_entry(0, 0, [math.nan, 1.0])
    finite = trace(event(1.0, {0: tensor([5.0, 1.0])}))
    verdict = compare_traces(RAISED, finite, {"before": fd(entry)})
    assert verdict.status == "verified", verdict.reason
    assert verdict.evidence["finite_difference"]["undefined"] == 1
    nan = trace(event(1.0, {0: tensor([math.nan, 1.0])}))
    assert compare_traces(RAISED, nan, {"before": fd(entry)}).status == "rejected"


def test_reference_undefined_everywhere_is_unverified() -> None:
    after = trace(event(1.0, {0: tensor([5.0, 1.0])}))
    undefined = {"before": fd(fd_entry(0, 0, [math.nan, math.nan]))}
    verdict = compare_traces(RAISED, after, undefined)
    assert verdict.status == "unverified" and "undefined" in verdict.reason


@pytest.mark.parametrize(
    ("after_value", "status"), [(0.0, "verified"), (-1.0, "verified"), (-1.2, "rejected")]
)
def test_kink_accepts_any_gradient_between_the_slopes(after_value: float, status: str) -> None:
    entry = fd_entry(0, 0, [0.0, 2.0])
    entry["methods"][0] = "kink"
    entry["intervals"] = [[-1.0, 1.0], None]
    after = trace(event(1.0, {0: tensor([after_value, 2.0])}))
    verdict = compare_traces(RAISED, after, {"before": fd(entry)})
    assert verdict.status == status, verdict.reason


def test_none_gradient_in_after_counts_as_zero_only_against_finite_differences() -> None:
    after = trace(event(1.0, {0: None}))
    unused = {"before": fd(fd_entry(0, 0, [0.0, 0.0], unused=True))}
    assert compare_traces(RAISED, after, unused).status == "verified"
    needed = {"before": fd(fd_entry(0, 0, [1.0, 0.0]))}
    verdict = compare_traces(RAISED, after, needed)
    assert verdict.status == "unverified" and "to be confirmed in float64" in verdict.reason
    confirmed = dict(fd_entry(0, 0, [1.0, 0.0]), precise=[[0, 1.0, 1e-9, 1e-9]])
    verdict = compare_traces(RAISED, after, {"before": dict(fd(confirmed), confirmed=True)})
    assert verdict.status == "rejected"
    assert "no gradient (None)" in verdict.reason
    lost = compare_traces(trace(event(1.0, {0: tensor([0.0, 0.0])})), after)
    assert lost.status == "rejected" and "None where before computes one" in lost.reason


def test_no_gradient_in_either_version_is_checked_by_finite_differences_of_after() -> None:
    both = trace(event(1.0, {0: tensor([1.0, 1.0]), 1: None}), leaves=2)
    assert without_claims(plan_fd(both, both)) == {
        "after": [{"event": 0, "leaf": 1, "elements": [0, 1]}]
    }
    independent = compare_traces(both, both, {"after": fd(fd_entry(0, 1, [0.0, 0.0]))})
    assert independent.status == "verified", independent.reason
    assert independent.evidence["leaves_without_gradient"] == [1]
    assert "leaves compared: #0 (line 3)" in independent.reason
    assert "independent of them by finite differences of the fix's forward: #1" in (
        independent.reason
    )
    still_cut = compare_traces(both, both, {"after": fd(fd_entry(0, 1, [0.0, 0.5]))})
    assert still_cut.status == "rejected"
    assert "gradient lost" in still_cut.reason and "element 1" in still_cut.reason


def test_a_leaf_torch_made_without_gradient_is_listed_as_not_compared() -> None:
    both = trace(event(1.0, {0: tensor([1.0, 1.0]), 1: None}), leaves=2)
    both["leaves"][1]["declared"] = False  # type: ignore[index]
    assert without_claims(plan_fd(both, both)) == {}
    verdict = compare_traces(both, both)
    assert verdict.status == "verified", verdict.reason
    assert "not compared: #1 (line 3) (no gradient in either version; made by torch" in (
        verdict.reason
    )
    assert "1" in verdict.evidence["leaves_not_compared"]


def test_a_leaf_torch_made_without_gradient_is_checked_for_a_fix_that_restores_one() -> None:
    both = trace(event(1.0, {0: tensor([1.0, 1.0]), 1: None}), leaves=2)
    both["leaves"][1]["declared"] = False  # type: ignore[index]
    both["parameter_names"] = {"1": "model.lin.weight"}
    plan = {"after": [{"event": 0, "leaf": 1, "elements": [0, 1]}]}
    assert without_claims(plan_fd(both, both, intent=fix_intent(["GF101"]))) == plan
    assert without_claims(plan_fd(both, both, intent=fix_intent(["GF104", "GF403"]))) == {}
    cut = {"after": fd(fd_entry(0, 1, [0.0, 0.5]))}
    lost = compare_traces(both, both, cut, intent=fix_intent(["GF101"]))
    assert lost.status == "rejected"
    assert lost.reason.startswith("gradient lost: leaf 1 'model.lin.weight' (")
    unused = {"after": fd(fd_entry(0, 1, [0.0, 0.0], unused=True))}
    independent = compare_traces(both, both, unused, intent=fix_intent(["GF101"]))
    assert independent.status == "verified", independent.reason
    assert "finite differences of the fix's forward: #1 'model.lin.weight' (line 3)" in (
        independent.reason
    )


def test_a_leaf_whose_reference_is_undefined_everywhere_is_listed_as_not_compared() -> None:
    before = trace(event(1.0, {0: tensor([1.0, 1.0]), 1: None}), leaves=2)
    after = trace(event(1.0, {0: tensor([1.0, 1.0]), 1: tensor([0.5, 0.5])}), leaves=2)
    undefined = {"before": fd(fd_entry(0, 1, [math.nan, math.nan]))}
    verdict = compare_traces(before, after, undefined)
    assert verdict.status == "verified", verdict.reason
    assert "over 1 backward call(s) and 1 leaf tensor(s); leaves compared: #0 (line 3);" in (
        verdict.reason
    )
    assert (
        "not compared: #1 (line 3) (the finite-difference reference is undefined (not "
        "finite) at each of its 2 element(s) estimated)"
    ) in verdict.reason
    assert verdict.evidence["leaves_compared"] == [0]


def test_a_frozen_leaf_is_not_checked_for_a_lost_gradient() -> None:
    both = trace(event(1.0, {0: tensor([1.0, 1.0]), 1: None}), leaves=2)
    both["events"][0]["frozen"] = [1]  # type: ignore[index]
    assert without_claims(plan_fd(both, both, intent=fix_intent(["GF101"]))) == {}
    verdict = compare_traces(both, both, intent=fix_intent(["GF101"]))
    assert verdict.status == "verified", verdict.reason
    assert "not compared: #1 (line 3) (no gradient in either version; frozen" in verdict.reason


def test_the_rules_whose_fix_restores_a_gradient_say_so() -> None:
    """Each rule declares it (one place per rule); the oracle reads the declaration."""
    from gradfix.codemods import ALL_RULES

    restoring = {rule.code for rule in ALL_RULES if rule.fix_restores_gradient}
    assert restoring == {"GF101", "GF102", "GF103", "GF105", "GF205"}
    assert fix_intent(["gf101", "GF201"]).restores_gradient
    assert not fix_intent(["GF104"]).restores_gradient
    assert not fix_intent(["GF999"]).restores_gradient  # a test's own rule
    assert fix_intent(["GF201"]).repairs and not fix_intent(["GF104"]).repairs


def test_same_failure_in_both_versions_is_blocked_not_rejected() -> None:
    failure = {
        "status": "error",
        "type": "TypeError",
        "message": "bad operand",
        "line": 7,
        "category": "code",
        "where": "other.py:2",
        "code": "return x + '2'",
    }
    ran = event(1.0, {0: tensor([1.0, 1.0])})
    verdict = compare_traces(trace(ran, outcome=failure), trace(ran, outcome=failure))
    assert verdict.status == "unverified", verdict.reason
    assert verdict.reason.startswith("blocked by TypeError: bad operand at other.py:2")
    changed_line = dict(failure, code="return x + 2.0")
    verdict = compare_traces(trace(ran, outcome=failure), trace(ran, outcome=changed_line))
    assert verdict.status == "rejected"  # the fix changed the failing statement


def test_timeout_says_what_would_make_it_verifiable() -> None:
    timeout = {"runner_error": {"kind": "timeout", "message": "timeout after 3 s"}}
    verdict = compare_traces(timeout, trace())
    assert "--max-steps" in verdict.reason
    # --cmd: the command timed out in both versions: not a failure "blocked" by a bug
    command = {"status": "error", "type": "CommandFailed", "message": "timeout after 3 s",
               "line": None, "category": "timeout"}  # fmt: skip
    both = compare_traces(trace(outcome=command), trace(outcome=command))
    assert both.status == "unverified" and "could not be executed: timeout" in both.reason
    assert "--max-steps" in both.reason
    assert '--cmd "python train.py --epochs 1"' in verdict.reason and "--entry" in verdict.reason


def test_missing_reference_is_planned_then_unverified_without_it() -> None:
    after = trace(event(1.0, {0: tensor([2.0, 0.0])}))
    assert without_claims(plan_fd(RAISED, after)) == {
        "before": [{"event": 0, "leaf": 0, "elements": None}]
    }
    verdict = compare_traces(RAISED, after)
    assert verdict.status == "unverified"
    assert "finite-difference" in verdict.reason


def test_nothing_is_planned_when_already_rejected() -> None:
    after = trace(event(2.0, {0: tensor([2.0, 0.0])}))  # forward changed
    assert without_claims(plan_fd(RAISED, after)) == {}


def test_partially_nan_gradient_plans_only_those_elements() -> None:
    before = trace(event(1.0, {0: tensor([math.nan, 3.0])}))
    after = trace(event(1.0, {0: tensor([0.0, 3.0])}))
    assert without_claims(plan_fd(before, after)) == {
        "before": [{"event": 0, "leaf": 0, "elements": [0]}]
    }


def test_fewer_backward_calls_after_a_raising_backward_is_rejected() -> None:
    verdict = compare_traces(RAISED, trace())
    assert verdict.status == "rejected"
    assert "after makes 0 backward call(s), before makes 1" in verdict.reason


def test_error_in_after_event_is_rejected() -> None:
    after = trace(
        event(1.0, {}, error="still broken"),
        outcome={
            "status": "error",
            "type": "RuntimeError",
            "message": "still broken",
            "line": 5,
            "category": "code",
        },
    )
    verdict = compare_traces(RAISED, after)
    assert verdict.status == "rejected"
    assert "still broken" in verdict.reason


def test_extra_leaf_in_after_is_rejected() -> None:
    before = trace(event(1.0, {0: tensor([1.0, 1.0])}))
    after = trace(event(1.0, {0: tensor([1.0, 1.0]), 1: tensor([1.0, 1.0])}), leaves=2)
    verdict = compare_traces(before, after)
    assert verdict.status == "rejected"
    assert "leaf" in verdict.reason


def test_runner_failure_and_environment_errors_are_unverified() -> None:
    timeout = {"runner_error": {"kind": "timeout", "message": "timeout after 3 s"}}
    verdict = compare_traces(timeout, trace())
    assert verdict.status == "unverified" and "timeout after 3 s" in verdict.reason
    missing = {
        "status": "error",
        "type": "FileNotFoundError",
        "message": "data.csv",
        "line": 2,
        "category": "env",
    }
    verdict = compare_traces(trace(outcome=missing), trace(outcome=missing))
    assert verdict.status == "unverified" and "FileNotFoundError" in verdict.reason


def test_nondeterministic_script_is_unverified() -> None:
    after = trace(event(1.0, {0: tensor([2.0, 0.0])}))
    replay = {"before": fd(fd_entry(0, 0, [2.0, 0.0]), probe={"0": 1.5})}
    verdict = compare_traces(RAISED, after, replay)
    assert verdict.status == "unverified" and "not deterministic" in verdict.reason


def test_module_level_tensors_without_backward() -> None:
    same = trace(tensors={"y": tensor([0.0, 2.0])})
    verdict = compare_traces(same, same)
    assert verdict.status == "verified"
    assert "no gradients were exercised" in verdict.reason
    changed = trace(tensors={"y": tensor([0.0, 3.0])})
    assert compare_traces(same, changed).status == "rejected"
    nothing = compare_traces(trace(), trace())
    assert nothing.status == "unverified"
    assert "--entry MODULE:FUNCTION" in nothing.reason  # what would make it verifiable


def test_trajectory_after_a_broken_gradient_is_self_checked() -> None:
    # Before's first backward leaves the leaf without gradient (a silent graph cut), so
    # its optimizer never moves it; the fixed run moves, and its next loss differs.
    before = trace(event(4.0, {0: None}), event(4.0, {0: None}, line=9))
    after = trace(event(4.0, {0: tensor([1.0, 1.0])}), event(3.0, {0: tensor([0.5, 0.5])}))
    plan = without_claims(plan_fd(before, after))
    assert plan == {
        "before": [{"event": 0, "leaf": 0, "elements": None}],
        "after": [{"event": 1, "leaf": 0, "elements": None}],
    }
    references = {"before": fd(fd_entry(0, 0, [1.0, 1.0])), "after": fd(fd_entry(1, 0, [0.5, 0.5]))}
    verdict = compare_traces(before, after, references)
    assert verdict.status == "verified", verdict.reason
    assert "parts from the fix's at #2" in verdict.reason


def test_changed_gradient_plans_finite_differences_of_the_changed_elements() -> None:
    before = trace(event(1.0, {0: tensor([math.nan, 1.0, 3.0])}))
    after = trace(event(1.0, {0: tensor([0.0, 1.0, 5.0])}))
    # float64 estimates too: they judge a silent graph cut float32's cannot
    planned = {"event": 0, "leaf": 0, "elements": [0, 2], "precise": True}
    assert without_claims(plan_fd(before, after)) == {"before": [planned]}


SILENT_BEFORE = trace(event(1.0, {0: tensor([1.0, 1.0])}))
SILENT_AFTER = trace(event(1.0, {0: tensor([1.0, 3.0])}))


def test_changed_gradient_without_finite_differences_is_rejected() -> None:
    verdict = compare_traces(SILENT_BEFORE, SILENT_AFTER)
    assert verdict.status == "rejected"
    assert verdict.reason.startswith("gradient changed:")
    assert "not computed to check it" in verdict.reason


@pytest.mark.parametrize(
    ("estimate", "status", "reason"),
    [
        (3.02, "verified", "(a silent graph cut) at 1 element(s)"),  # FD tolerance
        (1.0, "rejected", "agrees with before's autograd"),
        (2.0, "rejected", "gradient wrong:"),  # agrees with neither
        (math.nan, "rejected", "undefined there"),
    ],
)
def test_changed_gradient_is_judged_by_finite_differences_of_before(
    estimate: float, status: str, reason: str
) -> None:
    entry = fd_entry(0, 0, [math.nan, estimate])
    entry.update(indices=[1], values=entry["values"][1:], methods=["central"], noise=[0.0])
    verdict = compare_traces(SILENT_BEFORE, SILENT_AFTER, {"before": fd(entry)})
    assert verdict.status == status, verdict.reason
    assert reason in verdict.reason
    if status == "verified":
        assert verdict.evidence["silent_graph_cuts"] == [
            {
                "event": 0,
                "leaf": 0,
                "element": 1,
                "before_autograd": 1.0,
                "after": 3.0,
                "finite_difference": 3.02,
                "method": "central",
                "interval": None,
            }
        ]
        assert verdict.evidence["gradient"]["values_compared"] == 1  # element 0


def test_changed_gradient_estimates_at_a_kink_and_when_missing() -> None:
    def entry(interval: list[float] | None) -> dict[str, object]:
        built = fd_entry(0, 0, [2.0])
        built.update(indices=[1], methods=["kink" if interval else "central"], intervals=[interval])
        return built

    inside = compare_traces(SILENT_BEFORE, SILENT_AFTER, {"before": fd(entry([2.0, 4.0]))})
    assert inside.status == "verified", inside.reason
    assert inside.evidence["silent_graph_cuts"][0]["interval"] == [2.0, 4.0]
    # both gradients between the kink's slopes: finite differences tell neither wrong
    both = compare_traces(SILENT_BEFORE, SILENT_AFTER, {"before": fd(entry([0.0, 4.0]))})
    assert both.status == "unverified" and "no derivative there" in both.reason
    capped = fd_entry(0, 0, [1.0, 1.0])
    capped.update(indices=[0], values=[1.0], methods=["central"], noise=[0.0])
    missing = compare_traces(SILENT_BEFORE, SILENT_AFTER, {"before": fd(capped)})
    assert missing.status == "rejected" and "no finite-difference estimate" in missing.reason


def test_changed_gradient_whose_finite_differences_fail_is_rejected() -> None:
    failed = {"before": {"runner_error": {"kind": "timeout", "message": "timeout after 3 s"}}}
    verdict = compare_traces(SILENT_BEFORE, SILENT_AFTER, failed)
    assert verdict.status == "rejected"
    assert "could not check it" in verdict.reason and "timeout after 3 s" in verdict.reason


def test_changed_gradient_plans_the_later_calls_of_a_parted_trajectory() -> None:
    before = trace(event(4.0, {0: tensor([1.0, 1.0])}), event(4.0, {0: tensor([1.0, 1.0])}))
    after = trace(event(4.0, {0: tensor([1.0, 3.0])}), event(3.0, {0: tensor([0.5, 0.5])}))
    assert without_claims(plan_fd(before, after)) == {
        "before": [{"event": 0, "leaf": 0, "elements": [1], "precise": True}],
        "after": [{"event": 1, "leaf": 0, "elements": None}],
    }
    cut = fd_entry(0, 0, [1.0, 3.0])
    references = {"before": fd(cut), "after": fd(fd_entry(1, 0, [0.5, 0.5]))}
    verdict = compare_traces(before, after, references)
    assert verdict.status == "verified", verdict.reason
    assert "parts from the fix's at #2" in verdict.reason
    cut["values"] = [1.0, 1.0]  # before's autograd was right after all
    verdict = compare_traces(before, after, references)
    assert verdict.status == "rejected" and "backward call #1" in verdict.reason


# ------------------------------------------------------- leaves updated behind a view
REBOUND_LEAF = """
import torch
torch.manual_seed(0)
x = torch.randn(6, 3)
w = torch.randn(3, requires_grad=True)
w = w.view(3, 1)
opt = torch.optim.SGD([w], lr=0.1)
for step in range(3):
    opt.zero_grad()
    loss = ((x @ w) ** 2).mean()
    loss.backward()
    opt.step()
"""
VIEW_BEFORE_LOOP = REBOUND_LEAF.replace("w = w.view(3, 1)", "w_view = w.view(3, 1)").replace(
    "x @ w)", "x @ w_view)"
)
STALE_COPY_BEFORE_LOOP = VIEW_BEFORE_LOOP.replace("w.view(3, 1)", "w.view(3, 1).clone()")
COPY_IN_LOOP = STALE_COPY_BEFORE_LOOP.replace("w_view = w.view(3, 1).clone()\n", "").replace(
    "    opt.zero_grad()\n", "    opt.zero_grad()\n    w_view = w.view(3, 1).clone()\n"
)


def test_leaf_updated_behind_a_view_made_before_the_loop_is_perturbed_per_step() -> None:
    # The optimizer changes w in place; each step's loss reads it only through w_view.
    verdict = verify(REBOUND_LEAF, VIEW_BEFORE_LOOP)
    assert verdict.status == "verified", verdict.reason
    assert verdict.evidence["events_self_checked"] == 3


def test_stale_copy_of_an_updated_leaf_is_rejected() -> None:
    # The copy is made once: after the first step it no longer follows w.
    assert "w_view = w.view(3, 1).clone()\nopt" in STALE_COPY_BEFORE_LOOP
    assert "    w_view = w.view(3, 1).clone()\n    loss" in COPY_IN_LOOP
    verdict = verify(REBOUND_LEAF, STALE_COPY_BEFORE_LOOP)
    assert verdict.status == "rejected"
    assert "backward call #2" in verdict.reason
    assert verify(REBOUND_LEAF, COPY_IN_LOOP).status == "verified"


# ------------------------------------------- a leaf made from the value the name holds
BOUND_NONLEAF = """
import torch
torch.manual_seed(0)
x = torch.randn(5, 3)
w = torch.randn(4, 3, requires_grad=True).t() * 0.01
loss = (x @ w).pow(2).sum()
loss.backward()
print(w.grad)
"""
BOUND_LEAF = BOUND_NONLEAF.replace(
    "torch.randn(4, 3, requires_grad=True).t() * 0.01",
    "(torch.randn(4, 3).t() * 0.01).requires_grad_()",
)


def test_leaf_made_from_the_bound_value_is_compared_with_its_gradient() -> None:
    # Before's leaf (the randn) is unreachable; its gradient is 100x and transposed.
    verdict = verify(BOUND_NONLEAF, BOUND_LEAF)
    assert verdict.status == "verified", verdict.reason
    assert any("gradient of before's non-leaf 'w'" in note for note in verdict.evidence["notes"])


def test_leaf_made_from_the_bound_value_with_a_changed_gradient_is_rejected() -> None:
    # Same forward, doubled gradient: w * 2 - w.detach() == w.
    doubled = BOUND_LEAF.replace("(x @ w)", "(x @ (w * 2 - w.detach()))")
    verdict = verify(BOUND_NONLEAF, doubled)
    assert verdict.status == "rejected"
    assert "bound to 'w'" in verdict.reason


BOUND_NONLEAF_TRAINED = """
import torch
torch.manual_seed(0)
x = torch.randn(5, 3)
w = torch.randn(3, requires_grad=True).double()
for step in range(3):
    loss = (x.double() @ w).pow(2).sum()
    loss.backward()
    with torch.no_grad():
        if w.grad is not None:  # always None: the program never trains w
            w -= 0.01 * w.grad
            w.grad.zero_()
"""


def test_leaf_made_from_the_bound_value_may_train_where_before_could_not() -> None:
    # Before's program reads None for w.grad (its leaf is unreachable): its gradient is
    # broken from the first call, so after's trajectory may part from before's there.
    after = BOUND_NONLEAF_TRAINED.replace(
        "torch.randn(3, requires_grad=True).double()",
        "torch.randn(3).double().requires_grad_()",
    )
    verdict = verify(BOUND_NONLEAF_TRAINED, after)
    assert verdict.status == "verified", verdict.reason
    assert "before's gradient is broken at backward call #1" in verdict.reason
    doubled = after.replace("w -= 0.01 * w.grad", "w -= 0.02 * w.grad")
    # the fix's own gradients are still checked against finite differences
    wrong = after.replace("(x.double() @ w)", "(x.double() @ (w * 2 - w.detach()))")
    assert verify(BOUND_NONLEAF_TRAINED, doubled).status == "verified"
    assert verify(BOUND_NONLEAF_TRAINED, wrong).status == "rejected"


FORWARD_BEFORE_LOOP = """
import torch
torch.manual_seed(0)
w = torch.randn(3, requires_grad=True)
x = torch.randn(3)
loss = torch.tanh(x * w).pow(2).sum()
for step in range(3):
    w.grad = None
    loss.backward()
    w.data -= 0.1 * w.grad
"""


def test_a_forward_moved_into_the_loop_may_part_from_befores_stale_result() -> None:
    # Before's second call backpropagates the first step's freed graph: its result is
    # stale (the forward did not run again), so after's new result is no change.
    lines = FORWARD_BEFORE_LOOP.split("\n")
    forward = lines.index("loss = torch.tanh(x * w).pow(2).sum()")
    loop = lines.index("for step in range(3):")
    moved = [*lines[:forward], lines[loop], "    " + lines[forward], *lines[loop + 1 :]]
    after = "\n".join(moved)
    verdict = verify(FORWARD_BEFORE_LOOP, after)
    assert verdict.status == "verified", verdict.reason
    assert "before's gradient is broken at backward call #2" in verdict.reason
    # the first step must still match: a forward changed from the start is rejected
    changed = after.replace("pow(2)", "pow(3)")
    assert verify(FORWARD_BEFORE_LOOP, changed).status == "rejected"


def test_gradient_moved_away_from_a_named_leaf_is_rejected() -> None:
    before = BOUND_NONLEAF.replace(
        "w = torch.randn(4, 3, requires_grad=True).t() * 0.01",
        "w0 = torch.randn(4, 3, requires_grad=True)\nw = w0.t() * 0.01",
    )
    after = before.replace(
        "w0 = torch.randn(4, 3, requires_grad=True)", "w0 = torch.randn(4, 3)"
    ).replace("w = w0.t() * 0.01", "w = (w0.t() * 0.01).requires_grad_()")
    verdict = verify(before, after)
    assert verdict.status == "rejected", verdict.reason


def test_leaf_kept_under_its_name_with_another_value_keeps_its_own_reference() -> None:
    # eta = eta * 2 -> eta_scaled = eta * 2: after's 'eta' is the same leaf, not a leaf
    # made from before's value of 'eta', so the leaf's own gradient is the reference.
    before = (
        "import torch\neta = torch.nn.Parameter(torch.rand(4))\neta = eta * 2\n"
        "eta.sum().backward()\n"
    )
    after = before.replace("eta = eta * 2\neta.sum()", "eta_scaled = eta * 2\neta_scaled.sum()")
    verdict = verify(before, after)
    assert verdict.status == "verified", verdict.reason
    assert not any("non-leaf" in note for note in verdict.evidence["notes"])


def test_module_attribute_made_a_leaf_is_compared_with_its_gradient() -> None:
    before = """
import torch
from torch import nn

class Scale(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.randn(4, requires_grad=True) * 0.1

    def forward(self, x):
        return x * self.w

torch.manual_seed(0)
model = Scale()
model(torch.randn(3, 4)).pow(2).sum().backward()
"""
    after = before.replace(
        "torch.randn(4, requires_grad=True) * 0.1", "nn.Parameter(torch.randn(4) * 0.1)"
    )
    verdict = verify(before, after)
    assert verdict.status == "verified", verdict.reason
    assert any("non-leaf 'model.w'" in note for note in verdict.evidence["notes"])
    doubled = "return x * (self.w * 2 - self.w.detach())"
    wrong = verify(before, after.replace("return x * self.w", doubled))
    assert wrong.status == "rejected"


# A weight filled in place before `requires_grad = False` (the fix wraps the fill in
# no_grad); the word embedding's padding row gets no gradient by definition.
FROZEN_TABLE = """\
import torch
import torch.nn as nn

torch.manual_seed(0)
words = nn.Embedding(6, 3, padding_idx=1)
table = nn.Embedding(4, 3)
weight = table.weight
weight[:, 0] = 1.0
weight.requires_grad = False
ids = torch.tensor([[1, 2, 3]])
out = (words(ids) + table(torch.tensor([[0, 1, 2]]))).pow(3).mean()
out.backward()
"""
FROZEN_TABLE_FIX = FROZEN_TABLE.replace(
    "weight[:, 0] = 1.0", "with torch.no_grad():\n    weight[:, 0] = 1.0"
)


def test_frozen_weights_and_padding_rows_are_not_compared_with_finite_differences() -> None:
    verdict = verify(FROZEN_TABLE, FROZEN_TABLE_FIX)
    assert verdict.status == "verified", verdict.reason
    assert "frozen (requires_grad is False at the call)" in verdict.reason


# A leaf filled in place (raises) before a steep exponential: the central difference at the
# oracle's step is 1.5 % off the derivative, its extrapolation with the half step is not.
STEEP_AFTER_FILL = """\
import torch

w = torch.zeros(2, dtype=torch.float64, requires_grad=True)
w.add_(0.01)
torch.exp(300 * w).sum().backward()
"""
STEEP_AFTER_FILL_FIX = STEEP_AFTER_FILL.replace(
    "w.add_(0.01)", "with torch.no_grad():\n    w.add_(0.01)"
)


def test_strong_curvature_is_extrapolated_out_of_the_finite_difference() -> None:
    verdict = verify(STEEP_AFTER_FILL, STEEP_AFTER_FILL_FIX)
    assert verdict.status == "verified", verdict.reason


@pytest.mark.parametrize(
    ("precise", "status", "reason"),
    [
        # float32's estimate (1.01) accepts both 1.0 and 1.002; float64's decides
        ([[1, 1.002, 1e-12, 1e-9]], "verified", "1 of them by finite differences of before"),
        ([[1, 1.0, 1e-12, 1e-9]], "rejected", "float64 finite-difference derivative of before's"),
        ([[1, 1.01, 1e-12, 1e-9]], "rejected", "gradient wrong:"),
        (None, "rejected", "1.01 (no float64 estimate: the program uses float64 itself)"),
    ],
)  # fmt: skip
def test_a_change_float32_differences_cannot_judge_is_judged_in_float64(
    precise: list[list[float]] | None, status: str, reason: str
) -> None:
    before = trace(event(1.0, {0: tensor([1.0, 1.0])}))
    after = trace(event(1.0, {0: tensor([1.0, 1.002])}))
    entry = fd_entry(0, 0, [math.nan, 1.01])
    entry.update(indices=[1], values=[1.01], methods=["central"], noise=[0.0])
    if precise is None:
        entry["precise_error"] = "the program uses float64 itself"
    else:
        entry["precise"] = precise
    verdict = compare_traces(before, after, {"before": fd(entry)})
    assert verdict.status == status, verdict.reason
    assert reason in verdict.reason
    if status == "verified":
        assert verdict.evidence["silent_graph_cuts"][0]["method"] == "float64"


def test_a_change_float32_cannot_judge_without_a_float64_estimate_is_unverified() -> None:
    """Both gradients within float32's tolerance of the estimate and no float64 estimate
    of the element (the float64 run could not reach it): nothing tells them apart."""
    before = trace(event(1.0, {0: tensor([1.0, 1.0])}))
    after = trace(event(1.0, {0: tensor([1.0, 1.002])}))
    entry = fd_entry(0, 0, [math.nan, 1.01])
    entry.update(indices=[1], values=[1.01], methods=["central"], noise=[0.0])
    entry["precise_error"] = "the leaf is not used the same way in the float64 run"
    verdict = compare_traces(before, after, {"before": fd(entry)})
    assert verdict.status == "unverified", verdict.reason


def test_a_capped_silent_cut_is_judged_by_the_elements_estimated() -> None:
    before = trace(event(1.0, {0: tensor([1.0, 1.0, 1.0])}))
    after = trace(event(1.0, {0: tensor([3.0, 3.0, 3.0])}))
    entry = fd_entry(0, 0, [3.0])  # element 0 only: the budget ran out
    references = {"before": dict(fd(entry), capped=True)}
    verdict = compare_traces(before, after, references)
    assert verdict.status == "verified", verdict.reason
    assert "finite differences were capped" in verdict.reason
    assert verdict.evidence["finite_difference"]["uncompared"] == 2
    # uncapped, every changed element needs its estimate
    verdict = compare_traces(before, after, {"before": fd(entry)})
    assert verdict.status == "rejected", verdict.reason
    assert "no finite-difference estimate" in verdict.reason


# A relu whose kink lies a third of the oracle's step (1e-3) away: the gap of the slopes
# shrinks with the half step as curvature's would, and the extrapolation is 15 % off; a
# step an eighth as long does not reach the kink.
KINK_NEAR_STEP = """\
import torch

w = torch.zeros(1, dtype=torch.float64, requires_grad=True)
w.add_(1.0)
(w + torch.relu(w - 1.0003)).sum().backward()
"""
KINK_NEAR_STEP_FIX = KINK_NEAR_STEP.replace("w.add_(1.0)", "with torch.no_grad():\n    w.add_(1.0)")


def test_a_kink_near_the_step_is_not_taken_for_curvature() -> None:
    verdict = verify(KINK_NEAR_STEP, KINK_NEAR_STEP_FIX)
    assert verdict.status == "verified", verdict.reason


# First-order MAML: the inner gradient, taken without create_graph, is a constant to
# autograd; finite differences must hold it constant too (not follow it: second order).
FIRST_ORDER_INNER_STEP = """\
import torch

w = torch.zeros(3, dtype=torch.float64, requires_grad=True)
w.add_(0.5)
x = torch.linspace(-1, 1, 3, dtype=torch.float64)
inner = (torch.tanh(w * x + 1) ** 2).sum()
(g,) = torch.autograd.grad(inner, w)
fast = w - 0.5 * g
(torch.sin(fast * x) ** 2).sum().backward()
"""
FIRST_ORDER_INNER_STEP_FIX = FIRST_ORDER_INNER_STEP.replace(
    "w.add_(0.5)", "with torch.no_grad():\n    w.add_(0.5)"
)


def test_an_inner_gradient_without_create_graph_is_a_constant_to_finite_differences() -> None:
    verdict = verify(FIRST_ORDER_INNER_STEP, FIRST_ORDER_INNER_STEP_FIX)
    assert verdict.status == "verified", verdict.reason
    # GF406's fix is about that very order: its finite differences follow the inner step
    second = verify(FIRST_ORDER_INNER_STEP, FIRST_ORDER_INNER_STEP_FIX, rules=["GF406"])
    assert second.status == "rejected", second.reason


# A script that never calls backward and edits a layer's weight in place (BatchNorm folded
# into a conv, a neuron's column edited): autograd refuses the in-place change of a leaf.
NO_BACKWARD_EDIT = """
import torch
from torch import nn

torch.manual_seed(0)
conv = nn.Linear(3, 2)
w = torch.randn(2, 3)
conv.weight[:, :] = w * 2
x = torch.randn(4, 3)
out = conv(x)
print(out.sum().item())
"""
NO_BACKWARD_EDIT_FIX = NO_BACKWARD_EDIT.replace(
    "conv.weight[:, :] = w * 2", "with torch.no_grad():\n    conv.weight[:, :] = w * 2"
)
NO_BACKWARD_EDIT_SKIPPED = NO_BACKWARD_EDIT.replace("conv.weight[:, :] = w * 2", "pass")
NO_BACKWARD_OTHER_ERROR = NO_BACKWARD_EDIT.replace(
    "conv.weight[:, :] = w * 2", "raise ValueError('bad config')"
)


def test_a_fix_of_a_script_without_backward_is_verified_against_before_with_autograd_off() -> None:
    verdict = verify(NO_BACKWARD_EDIT, NO_BACKWARD_EDIT_FIX)
    assert verdict.status == "verified", verdict.reason
    assert "with autograd off" in verdict.reason
    assert "RuntimeError at line 8" in verdict.reason
    assert verdict.evidence["reference"] == "before with autograd off"
    assert verdict.evidence["before_outcome"]["type"] == "RuntimeError"


def test_a_fix_that_drops_the_edit_is_rejected_against_before_with_autograd_off() -> None:
    verdict = verify(NO_BACKWARD_EDIT, NO_BACKWARD_EDIT_SKIPPED)
    assert verdict.status == "rejected", verdict.reason
    assert "with autograd off" in verdict.reason


def test_a_failure_autograd_does_not_cause_leaves_the_fix_unverified() -> None:
    verdict = verify(NO_BACKWARD_OTHER_ERROR, NO_BACKWARD_EDIT_FIX)
    assert verdict.status == "unverified", verdict.reason
    assert "nothing to compare" in verdict.reason


def test_a_fix_of_a_run_that_raised_before_any_backward_keeps_its_forward() -> None:
    """Before raises an autograd error before its first backward call (an in-place change
    of a leaf), so no forward result of it is recorded: the same program run with autograd
    off up to that call gives the forward the fix must keep."""
    bug = """import torch
torch.manual_seed(0)
w = torch.randn(4, requires_grad=True)
w[1:3] = w[1:3] * 2
loss = (w ** 2).sum()
loss.backward()
"""
    kept = bug.replace("w[1:3] = w[1:3] * 2", "w = torch.cat([w[:1], w[1:3] * 2, w[3:]])")
    changed = bug.replace("w[1:3] = w[1:3] * 2", "w = torch.cat([w[:1], w[1:3] * 3, w[3:]])")
    assert verify(bug, kept).status == "verified"
    verdict = verify(bug, changed)
    assert verdict.status == "rejected", verdict.reason
    assert "forward changed" in verdict.reason and "autograd off" in verdict.reason


def test_a_state_carried_into_a_freed_graph_is_still_a_forward_reference() -> None:
    """ "Backward through the graph a second time" on a new result whose graph reaches into
    a freed one (a hidden state carried across steps): that forward ran, so a fix must keep
    it; only a root backpropagated before (made once, before the loop) is stale."""
    bug = """import torch
torch.manual_seed(0)
w = torch.randn(3, 3, requires_grad=True)
opt = torch.optim.SGD([w], lr=0.1)
h = torch.zeros(3)
for step in range(3):
    h = torch.tanh(w @ h + 1.0)
    loss = (h ** 2).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""
    detached = bug.replace("h = torch.tanh(w @ h + 1.0)", "h = torch.tanh(w @ h.detach() + 1.0)")
    reset = bug.replace("h = torch.tanh(w @ h + 1.0)", "h = torch.tanh(w @ torch.zeros(3) + 1.0)")
    assert verify(bug, detached).status == "verified"
    verdict = verify(bug, reset)
    assert verdict.status == "rejected" and "forward changed" in verdict.reason, verdict.reason


def test_a_stale_forward_backpropagated_again_is_rejected() -> None:
    """A loss made once before the loop and backpropagated each step with
    retain_graph=True: after's second call differentiates the first call's value though
    the weights were stepped (through `.data`, which no version counter sees)."""
    bug = """import torch
torch.manual_seed(0)
W = torch.randn(3, 3, requires_grad=True)
x = torch.randn(4, 3)
loss = (x @ W).exp().mean()
for k in range(3):
    W.grad = None
    loss.backward()
    W.data += -0.1 * W.grad
"""
    moved = bug.replace("loss = (x @ W).exp().mean()\n", "").replace(
        "    W.grad = None\n", "    W.grad = None\n    loss = (x @ W).exp().mean()\n"
    )
    retained = bug.replace("loss.backward()", "loss.backward(retain_graph=True)")
    assert verify(bug, moved).status == "verified"
    verdict = verify(bug, retained)
    assert verdict.status == "rejected" and "differentiates the value of call #1" in verdict.reason


def test_a_leaf_holding_inf_is_traced() -> None:
    """The trace is strict JSON: a leaf whose values sum to inf records no sum."""
    script = """import torch
w = torch.tensor([float("inf"), 1.0], requires_grad=True)
(w[1:] * 2).sum().backward()
"""
    verdict = verify(script, script)
    assert verdict.status == "verified", verdict.reason


def test_the_oracle_reads_no_rule_and_no_tracer() -> None:
    """What a fix declares is passed in (FixIntent); the autograd messages it matches are
    torch facts: the oracle imports neither the rules nor the tracer."""
    import ast

    import gradfix.verify.oracle as oracle

    modules = sorted(Path(oracle.__file__).parent.glob("*.py"))
    assert len(modules) > 1  # the package's layers, each checked
    imported = set()
    for module in modules:
        for node in ast.walk(ast.parse(module.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                imported.add(node.module or "")
            elif isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
    forbidden = ("gradfix.registry", "gradfix.trace", "gradfix.codemods")
    assert not {name for name in imported if name.startswith(forbidden)}


INT_LEAVES = """import torch

x = torch.tensor(1, requires_grad=True)
w = torch.tensor(2, requires_grad=True)
y = w * x + 3
y.backward()
print(x.grad, w.grad)
"""


@pytest.mark.parametrize(
    "after",
    [
        # the tutorial's float leaves, and a change that stops training x: both run and
        # their gradients match their own finite differences
        INT_LEAVES.replace("(1,", "(1.,").replace("(2,", "(2.,"),
        INT_LEAVES.replace("(1, requires_grad=True)", "(1.)").replace("(2,", "(2.,"),
    ],
)
def test_a_change_by_hand_whose_original_computes_no_forward_is_unverified(after: str) -> None:
    """``requires_grad`` asked of an integer tensor raises before any forward result, with
    autograd off too: nothing shows what a change made by hand should compute, so its
    self-consistent gradients prove nothing (unverified); a rule's fix declares it."""
    verdict = verify_sources(INT_LEAVES, after, intent=FixIntent.unknown())
    assert verdict.status == "unverified", verdict.reason
    assert "computes none either" in verdict.reason
    declared = verify_sources(INT_LEAVES, after, rules=["GF105"])
    assert declared.status == "verified", declared.reason


STEP_BEFORE_SECOND_BACKWARD = """import torch

torch.manual_seed(0)
w = torch.randn(3, requires_grad=True)
v = torch.randn(3, requires_grad=True)
opt = torch.optim.SGD([v], lr=0.1)
a = (w * v).sum()
b = (w * v ** 2).sum()
a.backward(retain_graph=True)
opt.step()
b.backward()
opt.step()
"""


def test_finite_differences_perturb_the_values_the_graph_was_built_from() -> None:
    """The step between two backward calls changes ``v`` after ``b``'s forward (before
    raises "modified by an inplace operation"): the derivative of ``b`` is taken at the
    values its forward read, not at the stepped ones it never saw (the profiler's records
    around the step are no use of ``v``); the fix that steps after both calls is verified."""
    fixed = STEP_BEFORE_SECOND_BACKWARD.replace("opt.step()\nb.backward()\n", "b.backward()\n")
    verdict = verify_sources(STEP_BEFORE_SECOND_BACKWARD, fixed, intent=FixIntent.unknown())
    assert verdict.status == "verified", verdict.reason


CARRIED_STATE = """import torch

torch.manual_seed(0)
cell = torch.nn.RNNCell(3, 4)
optimizer = torch.optim.SGD(cell.parameters(), lr=0.1)
h = torch.zeros(1, 4)
for step in range(3):
    optimizer.zero_grad()
    h = cell(torch.randn(1, 3), h)
    loss = h.pow(2).sum()
    loss.backward()
    optimizer.step()
"""


def test_a_fresh_state_per_step_made_by_hand_is_unverified_not_rejected() -> None:
    """Backpropagating through a state carried from the previous step raises "backward
    through the graph a second time"; a repair may detach the state (the forward kept) or
    start each step from a fresh one (the forward changed on purpose). Without a declared
    intent runs cannot tell which was meant: unverified, never rejected."""
    fresh = CARRIED_STATE.replace(
        "    h = cell(torch.randn(1, 3), h)", "    h = cell(torch.randn(1, 3), torch.zeros(1, 4))"
    )
    verdict = verify_sources(CARRIED_STATE, fresh, intent=FixIntent.unknown())
    assert verdict.status == "unverified", verdict.reason
    assert "fresh state" in verdict.reason
    detached = CARRIED_STATE.replace(
        "cell(torch.randn(1, 3), h)", "cell(torch.randn(1, 3), h.detach())"
    )
    assert verify_sources(CARRIED_STATE, detached, intent=FixIntent.unknown()).verified


def test_a_changed_forward_that_repairs_an_inplace_error_is_rejected() -> None:
    """The out-of-place repair of an in-place error computes the same values: a forward
    change there is evidence the change is wrong, with or without a declared intent."""
    bug = """import torch

torch.manual_seed(0)
w = torch.randn(3, requires_grad=True)
y = w.sigmoid()
y += 1
y.sum().backward()
"""
    changed = bug.replace("y += 1", "y = y + 2")
    verdict = verify_sources(bug, changed, intent=FixIntent.unknown())
    assert verdict.status == "rejected", verdict.reason


GAN_STEP_ORDER = """import torch

torch.manual_seed(0)
g = torch.nn.Linear(2, 2)
d = torch.nn.Linear(2, 1)
opt_d = torch.optim.SGD(d.parameters(), lr=0.1)
opt_g = torch.optim.SGD(g.parameters(), lr=0.1)
for step in range(3):
    fake = g(torch.randn(4, 2))
    d_loss = d(fake.detach()).pow(2).mean()
    g_loss = -d(fake).mean()
    d_loss.backward()
    opt_d.step()
    opt_d.zero_grad()
    g_loss.backward()
    opt_g.step()
    opt_g.zero_grad()
"""


def test_a_stop_gradient_both_versions_keep_is_no_lost_gradient_past_before_s_error() -> None:
    """Before raises at G's backward (D stepped first, after G's forward read it); the fix
    computes G's loss from the stepped D, and from there is checked against its own finite
    differences: they hold every optimizer step (autograd never differentiates through
    one) and do not see through ``d(fake.detach())``: G's weights without gradient at D's
    backward are what before's same statement gave too."""
    d_step = "    d_loss.backward()\n    opt_d.step()\n    opt_d.zero_grad()\n"
    g_loss = "    g_loss = -d(fake).mean()\n"
    fixed = GAN_STEP_ORDER.replace(g_loss + d_step, d_step + g_loss)
    assert fixed != GAN_STEP_ORDER
    verdict = verify_sources(GAN_STEP_ORDER, fixed, intent=FixIntent.unknown())
    assert verdict.status == "verified", verdict.reason
    assert "trajectory parts from the fix's at #2" in verdict.reason


ASKS_FOR_UNUSED_GRADIENTS = """import torch

torch.manual_seed(0)
w = torch.randn(3, requires_grad=True)
b = torch.randn(3, requires_grad=True)
x = torch.randn(4, 3)
loss = ((x * w + b) ** 2).sum()
gw, gb = torch.autograd.grad(loss, [w, b], create_graph=True)
fast = w - 0.1 * gw
(x * fast + b).pow(2).sum().backward()
"""


def test_a_gradient_autograd_grad_returned_and_nothing_read_need_not_be_asked_for() -> None:
    """MAML's inner step asks ``autograd.grad`` for every weight and adapts only some: a
    fix that asks only for those it uses computes everything the program reads."""
    fixed = ASKS_FOR_UNUSED_GRADIENTS.replace(
        "gw, gb = torch.autograd.grad(loss, [w, b], create_graph=True)",
        "(gw,) = torch.autograd.grad(loss, [w], create_graph=True)",
    )
    verdict = verify_sources(ASKS_FOR_UNUSED_GRADIENTS, fixed, intent=FixIntent.unknown())
    assert verdict.status == "verified", verdict.reason
    # a returned gradient the program reads must still be computed
    reads_both = ASKS_FOR_UNUSED_GRADIENTS.replace(
        "fast = w - 0.1 * gw", "fast = w - 0.1 * gw * gb"
    )
    dropped = reads_both.replace(
        "gw, gb = torch.autograd.grad(loss, [w, b], create_graph=True)",
        "(gw,) = torch.autograd.grad(loss, [w], create_graph=True)\ngb = torch.ones(3)",
    )
    assert verify_sources(reads_both, dropped, intent=FixIntent.unknown()).status == "rejected"


CARRIED_STATE_READ_OUT = """import torch

torch.manual_seed(0)
cell = torch.nn.RNNCell(3, 4)
out = torch.nn.Linear(4, 1)
optimizer = torch.optim.Adam([*cell.parameters(), *out.parameters()], lr=0.02)
h = torch.zeros(1, 4)
for step in range(4):
    optimizer.zero_grad()
    h = cell(torch.randn(1, 3), h)
    loss = sum(out(h * t).pow(2).sum() for t in range(1, 4))
    loss.backward()
    optimizer.step()
"""


def test_finite_differences_past_optimizer_steps_perturb_the_use_autograd_differentiates() -> None:
    """Past before's error the fix is checked against its own finite differences over
    several optimizer steps; holding each step must not count as a use of a leaf, or the
    perturbation lands on another use than the probe's (a layer read three times a step)."""
    detached = CARRIED_STATE_READ_OUT.replace(
        "cell(torch.randn(1, 3), h)", "cell(torch.randn(1, 3), h.detach())"
    )
    verdict = verify_sources(CARRIED_STATE_READ_OUT, detached, intent=FixIntent.unknown())
    assert verdict.status == "verified", verdict.reason
    assert "trajectory" in verdict.reason or "own finite differences" in verdict.reason


CONSTRAINED_UNDER_NO_GRAD = """import torch

torch.manual_seed(0)
kernel = torch.nn.Parameter(torch.randn(4))
x = torch.randn(8, 4)
optimizer = torch.optim.SGD([kernel], lr=0.1)
for step in range(2):
    optimizer.zero_grad()
    with torch.no_grad():
        clipped = kernel.clamp(-1.0, 1.0)
    loss = (x @ clipped).pow(2).mean() + 0.1 * kernel.pow(2).sum()
    loss.backward()
    optimizer.step()
"""


def test_a_no_grad_block_the_change_removes_or_adds_is_no_stop_gradient_meant() -> None:
    """A constraint computed under ``no_grad`` cuts the kernel's main gradient; the fix
    that removes the block restores it, and finite differences of the original count the
    values read in the block the change removed (verified). A change that adds such a
    block to the fixed program cuts it again: its finite differences count the block it
    added, so the gradient it lost shows; a stop-gradient the change adds may be meant (a
    target held constant), so that is no evidence against it: unverified, naming it."""
    fixed = CONSTRAINED_UNDER_NO_GRAD.replace(
        "    with torch.no_grad():\n        clipped", "    clipped"
    )
    assert fixed != CONSTRAINED_UNDER_NO_GRAD
    verdict = verify_sources(CONSTRAINED_UNDER_NO_GRAD, fixed, intent=FixIntent.unknown())
    assert verdict.status == "verified", verdict.reason
    back = verify_sources(fixed, CONSTRAINED_UNDER_NO_GRAD, intent=FixIntent.unknown())
    assert back.status == "unverified", back.reason
    assert "before's forward agrees with before's autograd" in back.reason
    assert "adds a stop-gradient (line 9: `with torch.no_grad():`)" in back.reason


WEIGHT_NORM_INPLACE = """import torch

torch.manual_seed(0)
lin = torch.nn.utils.parametrizations.weight_norm(torch.nn.Linear(3, 3))
x = torch.randn(4, 3)
h = lin(x).sigmoid()
h += 1
h.pow(2).sum().backward()
"""


def test_finite_differences_hold_a_leaf_made_from_another_leaf_s_values() -> None:
    """``weight_norm`` makes its parameters from the layer's weight: new leaves, constants
    to autograd, so the weight itself gets no gradient. Finite differences of before (it
    raises, so they are the reference) must not follow the weight into them."""
    fixed = WEIGHT_NORM_INPLACE.replace("h += 1", "h = h + 1")
    verdict = verify_sources(WEIGHT_NORM_INPLACE, fixed, intent=FixIntent.unknown())
    assert verdict.status == "verified", verdict.reason


STRAIGHT_THROUGH = """import torch

torch.manual_seed(0)


class RoundSTE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.round()

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output


w = torch.randn(6, requires_grad=True)
(RoundSTE.apply(w * 3) * torch.arange(6.0)).sum().backward()
"""


def test_a_gradient_the_program_defines_itself_is_never_rejected_by_finite_differences() -> None:
    """A straight-through estimator's gradient is no derivative of its forward (rounding:
    zero almost everywhere); a change to it (clipping the estimator) cannot be judged by
    finite differences: unverified, naming the Function, never rejected."""
    clipped = STRAIGHT_THROUGH.replace(
        "        return grad_output\n",
        "        (x,) = ctx.saved_tensors\n        return grad_output * (x.abs() < 1)\n",
    )
    assert clipped != STRAIGHT_THROUGH
    verdict = verify_sources(STRAIGHT_THROUGH, clipped, intent=FixIntent.unknown())
    assert verdict.status == "unverified", verdict.reason
    assert "RoundSTE.apply" in verdict.reason


BOTH_LOSSES_THEN_STEPS = """import torch

torch.manual_seed(0)
g = torch.nn.Linear(2, 2)
d = torch.nn.Sequential(torch.nn.Linear(2, 1), torch.nn.Sigmoid())
opt_d = torch.optim.Adam(d.parameters(), lr=0.01)
opt_g = torch.optim.Adam(g.parameters(), lr=0.01)
for step in range(2):
    fake = g(torch.randn(4, 2))
    real = torch.randn(4, 2)
    d_loss = -torch.mean(torch.log(d(real)) + torch.log(1.0 - d(fake)))  # bug
    g_loss = torch.mean(torch.log(1.0 - d(fake)))
    opt_d.zero_grad()
    d_loss.backward(retain_graph=True)
    opt_d.step()
    opt_g.zero_grad()
    g_loss.backward()
    opt_g.step()
"""


def test_backward_calls_the_change_reorders_are_matched_by_their_statement() -> None:
    """Before steps D and then backpropagates G's loss through it (an error); the fix
    steps G first, then computes D's loss on the detached fake: its calls come in the
    other order, each compared with before's call made by the same statement."""
    fixed = BOTH_LOSSES_THEN_STEPS.replace(
        "    d_loss = -torch.mean(torch.log(d(real)) + torch.log(1.0 - d(fake)))  # bug\n"
        "    g_loss = torch.mean(torch.log(1.0 - d(fake)))\n"
        "    opt_d.zero_grad()\n    d_loss.backward(retain_graph=True)\n    opt_d.step()\n"
        "    opt_g.zero_grad()\n    g_loss.backward()\n    opt_g.step()\n",
        "    g_loss = torch.mean(torch.log(1.0 - d(fake)))\n"
        "    opt_g.zero_grad()\n    g_loss.backward()\n    opt_g.step()\n"
        "    d_loss = -torch.mean(torch.log(d(real)) + torch.log(1.0 - d(fake.detach())))\n"
        "    opt_d.zero_grad()\n    d_loss.backward(retain_graph=True)\n    opt_d.step()\n",
    )
    assert fixed != BOTH_LOSSES_THEN_STEPS
    verdict = verify_sources(BOTH_LOSSES_THEN_STEPS, fixed, intent=FixIntent.unknown())
    assert verdict.status == "verified", verdict.reason
    assert "reorders the backward calls" in json.dumps(verdict.evidence)
    # a long run: after makes more calls than are recorded (its first ones are)
    long_fixed = fixed.replace("range(2)", "range(26)")
    verdict = verify_sources(
        BOTH_LOSSES_THEN_STEPS.replace("range(2)", "range(26)"),
        long_fixed,
        intent=FixIntent.unknown(),
    )
    assert verdict.evidence["backward_events"]["after"] == 52
    assert verdict.status == "verified", verdict.reason
    assert "reorders the backward calls" in json.dumps(verdict.evidence)


ANALYTIC_BACKWARD = """import torch

torch.manual_seed(0)


class Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return 2 * x


w = torch.randn(4, requires_grad=True)
(Square.apply(w) * torch.arange(1.0, 5.0)).sum().backward()
"""


def test_a_custom_backward_meant_as_the_derivative_is_judged_by_finite_differences() -> None:
    """A Function's own backward that ignores ``grad_output``: where its forward is not
    flat, finite differences are the reference: the fix multiplying by it is verified, a
    wrong one (by its sum) rejected."""
    fixed = ANALYTIC_BACKWARD.replace("return 2 * x\n", "return 2 * x * grad_output\n")
    wrong = ANALYTIC_BACKWARD.replace("return 2 * x\n", "return 2 * x * grad_output.sum()\n")
    assert fixed != ANALYTIC_BACKWARD != wrong
    verdict = verify_sources(ANALYTIC_BACKWARD, fixed, intent=FixIntent.unknown())
    assert verdict.status == "verified", verdict.reason
    verdict = verify_sources(ANALYTIC_BACKWARD, wrong, intent=FixIntent.unknown())
    assert verdict.status == "rejected", verdict.reason
