"""Sphere.dist clamps the inner product to exactly [-1, 1] before acos, so two coinciding points give acos'(1) = -inf and the gradient turns into nan.

source: https://github.com/geoopt/geoopt/pull/79
symptom: nan-grad
rule: ?
shape: manifold library class (Sphere with projx/inner/dist methods) used by an embedding nn.Module trained to match target distances; one pair is a self-pair
wrong: clamp-eps
why: clamping to [-0.999, 0.999] removes the nan but also flattens every distance below acos(0.999) = 0.045 to that value with zero gradient, so the nearby pair (1, 3) gets no gradient and a wrong distance.
"""
import torch
import torch.nn as nn

torch.manual_seed(0)


class Sphere:
    def projx(self, x):
        return x / x.norm(dim=-1, keepdim=True)

    def inner(self, x, u, v=None):
        if v is None:
            v = u
        return (u * v).sum(-1)

    def dist(self, x, y):
        inner = self.inner(None, x, y).clamp(-0.999, 0.999)
        return torch.acos(inner)


class SphereEmbedding(nn.Module):
    def __init__(self, n, dim, manifold):
        super().__init__()
        self.manifold = manifold
        w = torch.randn(n, dim)
        w[0] = torch.tensor([1.0, 0.0, 0.0])
        w[3] = w[1] + 0.01 * torch.randn(dim)  # two nearby points
        self.weight = nn.Parameter(w)

    def forward(self, i, j):
        x = self.manifold.projx(self.weight)
        return self.manifold.dist(x[i], x[j])


model = SphereEmbedding(4, 3, Sphere())
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
i = torch.tensor([0, 1, 2, 1, 0])
j = torch.tensor([0, 2, 3, 3, 1])  # (0, 0) is a self-pair
target = torch.tensor([0.0, 1.0, 0.5, 0.2, 1.2])
for step in range(2):
    optimizer.zero_grad()
    d = model(i, j)
    loss = (d - target).pow(2).mean()
    loss.backward()
    optimizer.step()

print("loss", round(loss.item(), 4))
print("grad_norm", round(model.weight.grad.norm().item(), 4))
print("grad_row3", round(model.weight.grad[3].norm().item(), 4))
