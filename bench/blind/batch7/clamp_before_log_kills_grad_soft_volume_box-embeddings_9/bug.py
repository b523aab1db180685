"""The soft box volume takes log(softplus(Z - z).clamp_min(eps)), so disjoint or inverted boxes, whose softplus side length falls below eps, get exactly zero gradient and can never grow back.

source: https://github.com/iesl/box-embeddings/issues/9
symptom: silent
rule: ?
shape: library volume module (SoftVolume) on box embeddings (nn.Module with an Embedding of min/max corners), Adam training loop
"""
import math
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)

eps = torch.finfo(torch.float).tiny


def soft_volume(z, Z, volume_temperature=0.3):
    sp = F.softplus(Z - z, beta=1 / volume_temperature)
    return torch.sum(torch.log(sp.clamp_min(eps)), dim=-1)  # bench: bug


class SoftVolume(nn.Module):
    def forward(self, z, Z):
        return soft_volume(z, Z)


class BoxModel(nn.Module):
    def __init__(self, n, dim):
        super().__init__()
        self.min_corner = nn.Embedding(n, dim)
        self.delta = nn.Embedding(n, dim)
        self.volume = SoftVolume()

    def forward(self, idx):
        z = self.min_corner(idx)
        return z, z + self.delta(idx)


model = BoxModel(4, 3)
with torch.no_grad():
    model.delta.weight[2] = -30.0  # a collapsed (inverted) box after a bad update
opt = torch.optim.Adam(model.parameters(), lr=0.1)
idx = torch.arange(4)
target = torch.full((4,), -1.0)
for step in range(15):
    opt.zero_grad()
    z, Z = model(idx)
    loss = (model.volume(z, Z) - target).abs().mean()
    loss.backward()
    opt.step()
print("loss", round(loss.item(), 4))
print("box 2 side sum", round(model.delta.weight[2].sum().item(), 4))
print("delta grad", round(model.delta.weight.grad.norm().item(), 4))
