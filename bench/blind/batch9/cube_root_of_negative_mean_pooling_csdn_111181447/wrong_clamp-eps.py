"""A power-mean pooling takes `(mean(x**p) + 1e-12) ** (1/p)` with p = 3 over features that can be negative, so the fractional power of a negative mean gives nan and the loss and all gradients become nan.

source: https://blog.csdn.net/qq_38507163/article/details/111181447
symptom: nan-grad
rule: ?
shape: flat training script: linear encoder, power-mean (p = 3) pooling over the token axis, linear head, MSE, Adam loop over several steps
wrong: clamp-eps
why: clamping the mean at 1e-12 removes the nan but maps every negative power mean to ~0 with zero gradient, so the pooled features and their gradients are wrong.
"""
import torch
import torch.nn as nn

torch.manual_seed(0)

encoder = nn.Linear(6, 8)
head = nn.Linear(8, 1)
opt = torch.optim.Adam(list(encoder.parameters()) + list(head.parameters()), lr=0.01)
x = torch.randn(16, 10, 6)
y = torch.randn(16, 1)
p = 3.0
for step in range(10):
    opt.zero_grad()
    x_i = encoder(x).transpose(1, 2)  # (batch, features, tokens)
    x_i = torch.mean(x_i ** p, dim=-1).clamp(min=1e-12) ** (1 / p)
    loss = ((head(x_i) - y) ** 2).mean()
    loss.backward()
    if step == 0:
        g0 = encoder.weight.grad.norm().item()
    opt.step()
print("loss", round(loss.item(), 4))
print("encoder_grad_step0", round(g0, 4))
print("encoder_w_norm", round(encoder.weight.norm().item(), 4))
