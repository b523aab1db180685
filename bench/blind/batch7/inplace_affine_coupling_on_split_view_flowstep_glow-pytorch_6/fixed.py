"""Glow's affine coupling updates z2 in place (z2 += shift; z2 *= scale), but z2 is a channel view of the same tensor as z1, which the coupling network's first conv saved for backward, so backward fails with "modified by an inplace operation".

source: https://github.com/chaiyujin/glow-pytorch/pull/6
symptom: error
rule: ?
shape: normalizing-flow step (nn.Module with ActNorm, invertible 1x1 conv and a coupling conv net), NLL loss, one backward
"""
import math
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class ActNorm2d(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(1, c, 1, 1) * 0.1)
        self.logs = nn.Parameter(torch.randn(1, c, 1, 1) * 0.1)

    def forward(self, x, logdet):
        z = (x + self.bias) * torch.exp(self.logs)
        return z, logdet + self.logs.sum() * x.shape[2] * x.shape[3]


class InvertibleConv1x1(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.weight = nn.Parameter(torch.linalg.qr(torch.randn(c, c))[0])

    def forward(self, x, logdet):
        z = F.conv2d(x, self.weight.view(*self.weight.shape, 1, 1))
        return z, logdet + torch.slogdet(self.weight)[1] * x.shape[2] * x.shape[3]


class FlowStep(nn.Module):
    def __init__(self, c, hidden):
        super().__init__()
        self.actnorm = ActNorm2d(c)
        self.invconv = InvertibleConv1x1(c)
        self.f = nn.Sequential(nn.Conv2d(c // 2, hidden, 3, padding=1), nn.ReLU(inplace=True), nn.Conv2d(hidden, c, 3, padding=1))

    def forward(self, x, logdet):
        z, logdet = self.actnorm(x, logdet)
        z, logdet = self.invconv(z, logdet)
        c = z.shape[1]
        z1, z2 = z[:, : c // 2], z[:, c // 2 :]
        h = self.f(z1)
        shift, scale = h[:, 0::2], h[:, 1::2]
        scale = torch.sigmoid(scale + 2.0)
        z2 = z2 + shift
        z2 = z2 * scale
        logdet = torch.log(scale).sum(dim=[1, 2, 3]) + logdet
        return torch.cat([z1, z2], 1), logdet


step = FlowStep(4, 8)
x = torch.randn(3, 4, 6, 6)
z, logdet = step(x, torch.zeros(3))
logp = -0.5 * (z**2 + math.log(2 * math.pi)).sum(dim=[1, 2, 3])
nll = -(logp + logdet).mean() / (4 * 6 * 6)
nll.backward()
print("nll", round(nll.item(), 4))
print("actnorm grad", round(step.actnorm.logs.grad.norm().item(), 4))
print("invconv grad", round(step.invconv.weight.grad.norm().item(), 4))
print("coupling grad", round(step.f[0].weight.grad.norm().item(), 4))
