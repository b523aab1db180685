"""Differentiating through the unrolled Chambolle-Pock TV minimisation: magnitude() takes sqrt(z0**2 + z1**2) of the dual variable, which starts at zero, so sqrt's infinite derivative at 0 times a zero upstream gradient corrupts every gradient with nan.

source: https://github.com/ahendriksen/ts_algorithms/pull/6
symptom: nan-grad
rule: ?
shape: library helper (unrolled TV-min reconstruction with dual clipping) wrapped in a module with a learned regularisation weight and a refinement CNN, MSE training step
"""
import torch
from torch import nn

torch.manual_seed(0)
TS_EPSILON = 1e-6  # stands in for tomosipo's ts.epsilon


def grad_2D(x):
    weight = x.new_zeros(2, 1, 3, 3)
    weight[0, 0] = torch.tensor([[0, 0, 0], [-1, 1, 0], [0, 0, 0]])
    weight[1, 0] = torch.tensor([[0, -1, 0], [0, 1, 0], [0, 0, 0]])
    return torch.conv2d(x[:, None], weight, padding=1)


def grad_2D_T(y):
    weight = y.new_zeros(2, 1, 3, 3)
    weight[0, 0] = torch.tensor([[0, 0, 0], [-1, 1, 0], [0, 0, 0]])
    weight[1, 0] = torch.tensor([[0, -1, 0], [0, 1, 0], [0, 0, 0]])
    return torch.conv_transpose2d(y, weight, padding=1)[:, 0]


def magnitude(z):
    # Add a small term to avoid division by zero when computing gradients
    return torch.sqrt(z[:, 0:1] ** 2 + z[:, 1:2] ** 2 + TS_EPSILON ** 2)


def clip(z, lamb):
    return z * torch.clamp(lamb / magnitude(z), min=None, max=1.0)


class MatrixOperator:
    """Dense projection operator standing in for a tomosipo operator."""

    def __init__(self, n, m):
        self.n = n
        self.W = torch.randn(m, n * n) / n

    def __call__(self, x):
        return (x.reshape(x.shape[0], -1) @ self.W.T)

    @property
    def T(self):
        return lambda p: (p @ self.W).reshape(p.shape[0], self.n, self.n)


def tv_min2d(A, y, lam, num_iterations=8, L=3.0):
    t = s = 1.0 / L
    u = torch.zeros(y.shape[0], A.n, A.n)
    p = torch.zeros_like(y)
    q = grad_2D(u)
    u_avg = u.clone()
    for _ in range(num_iterations):
        p = (p + s * (A(u_avg) - y)) / (1 + s)
        q = clip(q + s * grad_2D(u_avg), lam)
        u_new = u - (t * A.T(p) + t * grad_2D_T(q))
        u_avg = 2 * u_new - u
        u = u_new
    return u


class TVReconNet(nn.Module):
    def __init__(self, A):
        super().__init__()
        self.A = A
        self.log_lam = nn.Parameter(torch.tensor(-3.0))
        self.refine = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 1, 3, padding=1))

    def forward(self, y):
        u = tv_min2d(self.A, y, self.log_lam.exp())
        return u + self.refine(u[:, None])[:, 0]


n = 8
A = MatrixOperator(n, 40)
x_true = torch.zeros(2, n, n)
x_true[:, 2:6, 3:7] = 1.0
y = A(x_true) + 0.01 * torch.randn(2, 40)
net = TVReconNet(A)
loss = (net(y) - x_true).pow(2).mean()
loss.backward()
print("loss", round(loss.item(), 4))
print("grad log_lam", None if net.log_lam.grad is None else round(net.log_lam.grad.item(), 4))
print("grad refine", round(net.refine[0].weight.grad.norm().item(), 4))
