"""The closed-form 3x3 symmetric eigen-solver takes acos(r) and only afterwards overwrites the entries with r <= -1 or r >= 1, so for tensors with two equal eigenvalues (r = 1) the backward still goes through acos at its boundary (0 * inf) and the gradients are nan.

source: https://github.com/banctilrobitaille/torch-vectorized/issues/7
symptom: nan-grad
rule: ?
shape: DTI-style field model: nn.Module predicting a symmetric 3x3 tensor per voxel (fixed prior + zero-initialised linear correction), vectorised eigenvalue function (vSymEig stand-in), loss on the eigenvalues, Adam training loop, several steps
"""
from math import pi

import torch
import torch.nn as nn

torch.manual_seed(0)


def compute_eigen_values(input):
    a11 = input[:, 0].double()
    a12 = input[:, 1].double()
    a13 = input[:, 2].double()
    a22 = input[:, 4].double()
    a23 = input[:, 5].double()
    a33 = input[:, 8].double()

    nd = torch.pow(a12, 2) + torch.pow(a13, 2) + torch.pow(a23, 2)
    q = (a11 + a22 + a33) / 3.0
    p = torch.pow((a11 - q), 2) + torch.pow((a22 - q), 2) + torch.pow((a33 - q), 2) + 2.0 * nd
    p = torch.sqrt(p / 6.0)
    r = torch.pow((1.0 / p), 3) * ((a11 - q) * ((a22 - q) * (a33 - q) - a23 * a23) - a12 * (
        a12 * (a33 - q) - a13 * a23) + a13 * (a12 * a23 - a13 * (a22 - q))) / 2.0

    eps = 1e-7
    r = r.clamp(-1 + eps, 1 - eps)
    phi = torch.acos(r) / 3.0
    phi[r <= -1] = pi / 3
    phi[r >= 1] = 0

    e0 = q + 2 * p * torch.cos(phi)
    e2 = q + 2 * p * torch.cos(phi + pi * (2.0 / 3.0))
    e1 = 3 * q - e0 - e2
    return torch.stack([e0, e1, e2], dim=1).float()


class TensorField(nn.Module):
    def __init__(self, prior):
        super().__init__()
        self.register_buffer('prior', prior)
        self.correction = nn.Linear(4, 6)
        nn.init.zeros_(self.correction.weight)
        nn.init.zeros_(self.correction.bias)

    def forward(self, feats):
        c = self.correction(feats)
        d11, d12, d13, d22, d23, d33 = c.unbind(1)
        delta = torch.stack([d11, d12, d13, d12, d22, d23, d13, d23, d33], dim=1)
        return self.prior + 0.1 * delta


# voxels: axially symmetric priors (two equal eigenvalues) and general ones
prior = torch.zeros(6, 9)
for i, (a, b, c) in enumerate([(1, 1, 2), (3, 1, 1), (1, 2, 3), (2, 1, 3), (1, 1, 1.5), (2, 3, 4)]):
    prior[i, 0], prior[i, 4], prior[i, 8] = a, b, c
model = TensorField(prior)
feats = torch.randn(6, 4)
target = torch.tensor([[2.5, 1.0, 0.8], [3.2, 1.1, 0.9], [3.0, 2.1, 1.0], [3.1, 2.0, 1.1], [1.6, 1.2, 0.9], [4.1, 3.0, 2.0]])
optimizer = torch.optim.Adam(model.parameters(), lr=0.05)

for step in range(5):
    optimizer.zero_grad()
    eig_vals = compute_eigen_values(model(feats))
    loss = ((eig_vals - target) ** 2).mean()
    loss.backward()
    optimizer.step()

print("loss", round(loss.item(), 4))
print("correction grad norm", round(model.correction.weight.grad.norm().item(), 4))
print("correction weight norm", round(model.correction.weight.norm().item(), 4))
