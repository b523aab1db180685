"""The ODE solver's likelihood computation detaches the velocity and the divergence inside the dynamics function even when called with enable_grad=True, so the log-likelihood is cut from the velocity model and its parameters get no gradient (.grad stays None).

source: https://github.com/facebookresearch/flow_matching/pull/91
symptom: none-grad
rule: ?
shape: continuous normalizing flow: velocity-field nn.Module, ODESolver.compute_likelihood (Euler steps from t=1 to 0, exact divergence via autograd), maximum-likelihood Adam loop over several steps
wrong: dropped-term
why: removing only the final detach lets the error go away, but each divergence term stays detached, so the log-determinant part of the log-likelihood contributes no gradient.
"""
import math

import torch
import torch.nn as nn

torch.manual_seed(0)


def gradient(output, x, create_graph=False):
    return torch.autograd.grad(output, x, torch.ones_like(output), create_graph=create_graph)[0]


class Velocity(nn.Module):
    def __init__(self, dim=2, hidden=32):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim + 1, hidden), nn.Tanh(), nn.Linear(hidden, dim))

    def forward(self, x, t):
        return self.net(torch.cat([x, t.expand(x.shape[0], 1)], dim=1))


class ODESolver:
    def __init__(self, velocity_model):
        self.velocity_model = velocity_model

    def compute_likelihood(self, x_1, log_p0, step_size=0.125, enable_grad=False):
        def dynamics_func(t, xt):
            with torch.set_grad_enabled(True):
                if not xt.requires_grad:
                    xt = xt.requires_grad_()
                ut = self.velocity_model(xt, t)
                div = 0
                for i in range(ut.flatten(1).shape[1]):
                    div += gradient(ut[:, i], xt, create_graph=True)[:, i].detach()
            if not enable_grad:
                ut = ut.detach()
                div = div.detach()
            return ut, div

        n_steps = int(round(1.0 / step_size))
        with torch.set_grad_enabled(enable_grad):
            xt = x_1
            log_det = torch.zeros(x_1.shape[0])
            for k in range(n_steps):
                t = torch.tensor([[1.0 - k * step_size]])
                ut, div = dynamics_func(t, xt)
                xt = xt - step_size * ut
                log_det = log_det - step_size * div
            return xt, log_p0(xt) + log_det


def log_p0(x):
    return -0.5 * (x ** 2).sum(dim=1) - math.log(2 * math.pi)


model = Velocity()
solver = ODESolver(model)
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
data = torch.randn(64, 2) * torch.tensor([1.5, 0.5]) + torch.tensor([1.0, -1.0])
for step in range(5):
    opt.zero_grad()
    _, log_p = solver.compute_likelihood(data, log_p0, enable_grad=True)
    loss = -log_p.mean()
    loss.backward()
    if step == 0:
        g = model.net[0].weight.grad
        g0 = None if g is None else round(g.norm().item(), 4)
    opt.step()
print("nll", round(loss.item(), 4))
print("grad_step0", g0)
print("w_norm", round(model.net[0].weight.norm().item(), 4))
