"""A custom atan2 autograd.Function guards its backward denominator only against exact zero (torch.where(norms == 0, 1, norms)); for a nearly axis-aligned edge the squared components are tiny but nonzero, the backward divides by them, the forces (a first derivative) blow up and the force loss's gradient is nan.

source: https://github.com/facebookresearch/fairchem/pull/1574
symptom: nan-grad
rule: ?
shape: custom autograd.Function (Safeatan2) inside an energy model (nn.Module), forces from autograd.grad(create_graph=True), force-matching loss, one backward
"""
import torch
import torch.nn as nn

torch.manual_seed(0)
EPS = 1e-7


class Safeatan2(torch.autograd.Function):
    @staticmethod
    def forward(ctx, y, x):
        ctx.save_for_backward(y, x)
        return torch.atan2(y, x)

    @staticmethod
    def backward(ctx, grad_output):
        y, x = ctx.saved_tensors
        denom = (x.pow(2) + y.pow(2)).clamp(min=EPS)
        return (x / denom) * grad_output, (-y / denom) * grad_output


class EdgeEnergy(nn.Module):
    def __init__(self):
        super().__init__()
        self.radial = nn.Sequential(nn.Linear(1, 8), nn.Tanh(), nn.Linear(8, 1))
        self.angular = nn.Sequential(nn.Linear(1, 8), nn.Tanh(), nn.Linear(8, 1))

    def forward(self, edge_vec):
        dist = edge_vec.norm(dim=1, keepdim=True)
        v = edge_vec / dist
        gamma = Safeatan2.apply(v[:, 0], v[:, 2])
        return (self.radial(dist) + self.angular(gamma.unsqueeze(1))).sum()


model = EdgeEnergy()
# the first edge is almost exactly y-aligned, the last one exactly
edge_vec = torch.tensor([[1e-21, 1.0, 3e-22], [0.3, 0.8, 0.5], [-0.4, 0.6, 0.2], [0.0, 1.0, 0.0]], requires_grad=True)
target_forces = torch.randn(4, 3) * 0.1
energy = model(edge_vec)
forces = -torch.autograd.grad(energy, edge_vec, create_graph=True)[0]
loss = ((forces - target_forces) ** 2).mean()
loss.backward()
print("loss", round(loss.item(), 4))
g = model.angular[0].weight.grad
print("angular grad", None if g is None else round(g.norm().item(), 4))
print("radial grad", round(model.radial[0].weight.grad.norm().item(), 4))
