# The correct examples of seed 004.
import torch

a = torch.tensor([1., 2., 3., 4., 5.], requires_grad=True)
b = a[:2]
b.retain_grad()
c = 2. * b.sum()
c.retain_grad()
c.backward()
print(b.grad)


def loss_function(x):
    mask = x < 0.003
    gamma_x = torch.ones_like(x)
    gamma_x[mask] = 12.9 * x[mask]
    mask = x >= 0.003
    gamma_x[mask] = x[mask] ** 0.5
    loss = torch.mean((x - gamma_x) ** 2)
    return loss


x = torch.tensor(([0, 0.0025, 0.5, 0.8, 1]), requires_grad=True)
loss = loss_function(x)
loss.backward()
print(x.grad)
