"""Seed 004: a mask-weighted blend with a sqrt branch gives nan gradients (GF301)."""
import torch


def loss_function(x):
    mask = (x < 0.003).float()
    gamma_x = mask * 12.9 * x + (1 - mask) * (x ** 0.5)
    loss = torch.mean((x - gamma_x) ** 2)
    return loss


x = torch.tensor([0, 0.0025, 0.5, 0.8, 1], requires_grad=True)
loss = loss_function(x)
loss.backward()
print(x.grad)  # tensor([nan, 0.1416, -0.0243, -0.0167, 0.0000])
