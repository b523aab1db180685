"""GaussianEncoding stores its fixed random Fourier matrix b as nn.Parameter(requires_grad=False); when the training script later unfreezes the model with model.requires_grad_(True), b becomes trainable by accident and the optimizer moves the random projection.

source: https://github.com/jmclong/random-fourier-features-pytorch/issues/6
symptom: silent
rule: ?
shape: coordinate-MLP nn.Module (learnable input warp, GaussianEncoding layer holding a fixed random matrix, MLP head); two-stage training script that freezes then unfreezes the model
"""
import math

import torch
import torch.nn as nn

torch.manual_seed(0)


def sample_b(sigma, size):
    return torch.randn(size) * sigma


def gaussian_encoding(v, b):
    vp = 2 * math.pi * v @ b.T
    return torch.cat((torch.cos(vp), torch.sin(vp)), dim=-1)


class GaussianEncoding(nn.Module):
    def __init__(self, sigma, input_size, encoded_size):
        super().__init__()
        b = sample_b(sigma, (encoded_size, input_size))
        self.b = nn.parameter.Parameter(b, requires_grad=False)  # bench: bug

    def forward(self, v):
        return gaussian_encoding(v, self.b)


class CoordinateMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.warp = nn.Linear(2, 2)  # learnable coordinate refinement
        self.encoding = GaussianEncoding(sigma=1.0, input_size=2, encoded_size=8)
        self.mlp = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 1))

    def forward(self, v):
        return self.mlp(self.encoding(self.warp(v)))


model = CoordinateMLP()
b0 = model.encoding.b.detach().clone()
v, y = torch.rand(32, 2), torch.rand(32, 1)

# stage 1: train only the head
model.requires_grad_(False)
model.mlp.requires_grad_(True)
opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-2)
for step in range(3):
    opt.zero_grad()
    nn.functional.mse_loss(model(v), y).backward()
    opt.step()

# stage 2: fine-tune everything
model.requires_grad_(True)
opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-2)
for step in range(3):
    opt.zero_grad()
    loss = nn.functional.mse_loss(model(v), y)
    loss.backward()
    opt.step()

print("loss", round(loss.item(), 4))
print("b_change", round((model.encoding.b - b0).norm().item(), 4))
wg = model.warp.weight.grad
print("warp_grad", None if wg is None else round(wg.norm().item(), 4))
