"""``gradfix trace --write`` fixes what a run shows: the nan gradients of a square root of
an error that reaches 0 (GF303) and of an angle whose cosine reaches ±1 (GF304), a `.data`
read that cuts a decoder's graph (GF205); each fix is proven by running the program again."""

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

DECODER = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


class Decoder(nn.Module):
    def __init__(self, size, vocab, steps=3):
        super().__init__()
        self.cell = nn.GRUCell(vocab, size)
        self.out = nn.Linear(size, vocab)
        self.steps = steps

    def sample(self, h):
        logits = []
        token = torch.zeros(h.shape[0], self.out.out_features)
        for _ in range(self.steps):
            h = self.cell(token, h)
            step = self.out(h)
            logits.append(step)
            token = F.one_hot(step.argmax(-1), self.out.out_features).float()
        return torch.stack(logits, 1).data  # the logits leave the graph


torch.manual_seed(0)
decoder = Decoder(4, 5)
target = torch.randint(0, 5, (2, 3))
logits = decoder.sample(torch.randn(2, 4))
loss = F.cross_entropy(logits.reshape(-1, 5), target.reshape(-1))
loss.backward()
print(round(loss.item(), 4), decoder.out.weight.grad is None)
"""

# A slice rewritten with itself: the run shows an in-place change of a saved tensor (the
# family of GF204, whose rewrite still raises); GF202's rewrite of the same line holds.
SELF_SLICE = """\
import torch


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(4, 4, 3)

    def forward(self, x, y):
        x = self.conv(x)
        var = self.conv(y).flatten()
        x[0, :, 0, 0] = x[0, :, 0, 0] * var
        return torch.mean(x)


torch.manual_seed(0)
model = Model()
loss = model(torch.ones(1, 4, 3, 3), torch.ones(1, 4, 3, 3))
loss.backward()
print(round(loss.item(), 4), round(model.conv.weight.grad.norm().item(), 4))
"""


@pytest.mark.parametrize(
    ("source", "code", "fixed"),
    [
        (RMSE, "GF303", "    return torch.where(mse > 0, torch.sqrt(torch.where(mse > 0, mse, "),
        (MARGIN, "GF304", "        return 2 * cos_theta ** 2 - 1\n"),
        (DECODER, "GF205", "        return torch.stack(logits, 1)  # the logits"),
        (SELF_SLICE, "GF202", "        x[0, :, 0, 0] = x[0, :, 0, 0].clone() * var\n"),
    ],
    ids=["rmse", "angular-margin", "data-in-decoder", "self-slice-after-another-rule"],
)
def test_trace_write_fixes_what_the_run_shows(
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
