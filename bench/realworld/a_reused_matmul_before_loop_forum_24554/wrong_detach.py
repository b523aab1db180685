"""Computes `y = t @ a` once before the loop and reuses it in every iteration's loss

source: https://discuss.pytorch.org/t/backpropagation-graph-is-reused-while-it-shouldnt/24554
symptom: error
rule: GF401
shape: script loop: a value derived from parameters is built once outside the loop, each iteration calls backward
wrong: detach
why: detaches the precomputed product, so the repeated backward no longer fails but a gets no gradient at all
"""
import torch

measure = torch.nn.MSELoss()

x = torch.tensor([1, 0], dtype=torch.float64)
t = torch.eye(2, dtype=torch.float64, requires_grad=True)
a = torch.ones(2, dtype=torch.float64, requires_grad=True)
y = (t @ a).detach()

for __ in range(2):
    x_out = t @ (x + y)
    loss = measure(x_out, x)
    loss.backward()

print(round(loss.item(), 4), [round(v, 4) for v in a.grad.tolist()])
