"""NorMuon rescales the row-normalised update by norm_U / norm_U_new without a floor on the denominator, so a weight matrix whose gradient is all zero (the layer feeding a zero-initialised output projection) gets 0/0 = nan in its update and every weight turns nan.

source: https://github.com/microsoft/dion/pull/24
symptom: nan-grad
rule: ?
shape: optimizer library (NorMuon: momentum, Newton-Schulz orthogonalisation, neuron-wise second-moment normalisation, norm rescale) on a model with a zero-initialised projection
wrong: other
why: drops the norm-preserving rescale to get rid of the 0/0, so every nonzero update keeps the inflated norm of the row-normalised matrix and the steps are far too large
"""
import torch
import torch.nn as nn

torch.manual_seed(0)


def zeropower_via_newtonschulz(G, steps=5):
    a, b, c = 3.4445, -4.7750, 2.0315
    X = G / (G.norm() + 1e-7)
    for _ in range(steps):
        A = X @ X.t()
        X = a * X + (b * A + c * A @ A) @ X
    return X


def normuon_normalization(u, v, muon_beta2):
    norm_u = u.norm(p=2, dim=(-2, -1), keepdim=True)
    neuron_norms = (u * u).mean(dim=-1, keepdim=True)
    v_new = torch.lerp(v, neuron_norms, 1 - muon_beta2)
    u = u / (v_new.sqrt() + 1e-8)
    return u, v_new


class NorMuon(torch.optim.Optimizer):
    def __init__(self, params, lr=0.02, momentum=0.95, muon_beta2=0.95):
        super().__init__(params, dict(lr=lr, momentum=momentum, muon_beta2=muon_beta2))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["momentum_buffer"] = torch.zeros_like(p)
                    state["variance_neuron"] = torch.zeros(p.shape[0], 1)
                buf = state["momentum_buffer"].mul_(group["momentum"]).add_(p.grad)
                u = zeropower_via_newtonschulz(buf)
                u, state["variance_neuron"] = normuon_normalization(u, state["variance_neuron"], group["muon_beta2"])
                p.add_(u, alpha=-group["lr"])


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 16, bias=False)
        self.proj = nn.Linear(16, 8, bias=False)
        self.gate = nn.Linear(8, 8, bias=False)
        nn.init.zeros_(self.proj.weight)

    def forward(self, x):
        return x + self.gate(x) * self.proj(torch.relu(self.fc(x)))


model = Block()
opt = NorMuon(model.parameters())
x, y = torch.randn(32, 8), torch.randn(32, 8)
for step in range(3):
    opt.zero_grad()
    loss = (model(x) - y).pow(2).mean()
    loss.backward()
    opt.step()
print("loss", round(loss.item(), 4))
print("fc weight", round(model.fc.weight.norm().item(), 4))
print("proj weight", round(model.proj.weight.norm().item(), 4))
