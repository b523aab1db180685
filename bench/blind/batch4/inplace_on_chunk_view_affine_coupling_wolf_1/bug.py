"""The affine coupling transform chunks the network output into mu and log_scale and then applies mul_/tanh_ in place to the log_scale chunk, a view produced by a multi-output op, which autograd refuses.

source: https://github.com/XuezheMax/wolf/pull/1
symptom: error
rule: ?
shape: normalizing flow: NICE/affine coupling layer module holding a conditioning MLP and an Affine transform (calc_params chunks the MLP output); NLL loss with log-determinant
"""
import math

import torch
import torch.nn as nn

torch.manual_seed(0)


class Affine(nn.Module):
    def __init__(self, dim, alpha):
        super().__init__()
        self.dim, self.alpha = dim, alpha

    def calc_params(self, params):
        mu, log_scale = params.chunk(2, dim=self.dim)
        scale = log_scale.mul_(0.5).tanh_().mul(self.alpha).add(1.0)  # bench: bug
        return mu, scale

    def fwd(self, z, params):
        mu, scale = self.calc_params(params)
        z = (z + mu).mul(scale)
        logdet = scale.log().sum(dim=self.dim)
        return z, logdet


class NICE(nn.Module):
    def __init__(self, features=6, hidden=16):
        super().__init__()
        self.half = features // 2
        self.net = nn.Sequential(nn.Linear(self.half, hidden), nn.ELU(), nn.Linear(hidden, 2 * (features - self.half)))
        self.transform = Affine(dim=1, alpha=1.0)

    def forward(self, x):
        z1, z2 = x[:, : self.half], x[:, self.half :]
        params = self.net(z1)
        z2, logdet = self.transform.fwd(z2, params)
        return torch.cat([z1, z2], dim=1), logdet


flow = NICE()
x = torch.randn(32, 6) * 1.5 + 0.3
z, logdet = flow(x)
log_pz = -0.5 * (z ** 2).sum(1) - 0.5 * z.shape[1] * math.log(2 * math.pi)
nll = -(log_pz + logdet).mean()
nll.backward()
print("nll", round(nll.item(), 4))
print("first layer grad", round(flow.net[0].weight.grad.norm().item(), 4))
print("last layer grad", round(flow.net[2].weight.grad.norm().item(), 4))
