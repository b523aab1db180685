"""The PyTorch backend's as_tensor packs the tuple of trainable PDE coefficients with torch.as_tensor, which copies their values into a new tensor without a graph, so the inverse problem's external trainable variables get .grad None and are never identified.

source: https://github.com/lululxvi/deepxde/pull/1318
symptom: none-grad
rule: ?
shape: PINN inverse problem: FNN module, backend helper as_tensor packing external trainable variables (C1, C2) into one tensor, PDE residual using them + data loss; one Adam step over net and variables
wrong: detach
why: marking the packed tensor with requires_grad = True makes it a new leaf: the residual now has a graph, but it ends at the copy, so C1 and C2 still get .grad None and never move.
"""
import torch
import torch.nn as nn

torch.manual_seed(0)


def as_tensor(data, dtype=None):
    return torch.as_tensor(data, dtype=dtype)


C1 = torch.tensor([1.0], requires_grad=True)
C2 = torch.tensor([0.5], requires_grad=True)
external_trainable_variables = [C1, C2]
net = nn.Sequential(nn.Linear(2, 16), nn.Tanh(), nn.Linear(16, 1))


def pde(x, y, coeffs):
    dy = torch.autograd.grad(y.sum(), x, create_graph=True)[0]
    y_x, y_t = dy[:, :1], dy[:, 1:]
    y_xx = torch.autograd.grad(y_x.sum(), x, create_graph=True)[0][:, :1]
    return y_t + coeffs[0] * y * y_x - coeffs[1] * y_xx


opt = torch.optim.Adam(list(net.parameters()) + external_trainable_variables, lr=1e-2)
x = torch.rand(32, 2, requires_grad=True)
x_obs, y_obs = torch.rand(8, 2), torch.rand(8, 1)
coeffs = as_tensor((C1, C2))
coeffs.requires_grad = True
coeffs = coeffs.reshape(-1)
loss = (pde(x, net(x), coeffs) ** 2).mean() + ((net(x_obs) - y_obs) ** 2).mean()
opt.zero_grad()
loss.backward()
opt.step()
print("loss", round(loss.item(), 4))
print("C1 grad", None if C1.grad is None else round(C1.grad.item(), 4))
print("C1, C2 after step", round(C1.item(), 4), round(C2.item(), 4))
