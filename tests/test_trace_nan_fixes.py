"""``gradfix trace --write`` fixes the nan gradients a run shows at a square root of an
error that reaches 0 (GF303) and at an angle whose cosine reaches ±1 (GF304), and proves
the fix by running the program again."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

RMSE = """\
import torch
import torch.nn.functional as F

torch.manual_seed(0)
model = torch.nn.Linear(3, 1)
x = torch.randn(4, 3)
with torch.no_grad():
    y = model(x)  # the model fits the batch: the error is exactly 0


def rmse(pred, target):
    return torch.sqrt(F.mse_loss(pred, target))


loss = rmse(model(x), y)
loss.backward()
print(loss.item(), model.weight.grad)
"""

MARGIN = """\
import torch as T
import torch.nn as nn


class Margin(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(T.tensor([[1.0, 2.0, 2.0], [0.5, -1.0, 0.0]]))

    def forward(self, x):
        w = self.weight / self.weight.norm(dim=1, keepdim=True)
        cos_theta = (x / x.norm(dim=1, keepdim=True) @ w.t()).clamp(-1, 1)
        theta = cos_theta.acos()
        return T.cos(2 * theta)


x = T.tensor([[2.0, 4.0, 4.0]], requires_grad=True)
out = Margin()(x).sum()
out.backward()
print(round(out.item(), 4), T.isnan(x.grad).any().item())
"""


@pytest.mark.parametrize(
    ("source", "code", "fixed"),
    [
        (RMSE, "GF303", "    return torch.where(mse > 0, torch.sqrt(torch.where(mse > 0, mse, "),
        (MARGIN, "GF304", "        return 2 * cos_theta ** 2 - 1\n"),
    ],
    ids=["rmse", "angular-margin"],
)
def test_trace_write_fixes_the_nan_gradient_the_run_shows(
    tmp_path: Path, source: str, code: str, fixed: str
) -> None:
    script = tmp_path / "train.py"
    script.write_text(source, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "gradfix", "trace", "--write", "--format", "concise", "--",
         sys.executable, script.name],
        capture_output=True, text=True, cwd=tmp_path, check=False,
    )  # fmt: skip
    assert f" {code} verified: " in done.stdout, done.stdout + done.stderr
    assert fixed in script.read_text(encoding="utf-8")
    after = subprocess.run(
        [sys.executable, script.name], capture_output=True, text=True, cwd=tmp_path, check=True
    )
    assert "nan" not in after.stdout.lower() and "True" not in after.stdout
