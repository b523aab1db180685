"""Seed 000: assembling derived values into a new tensor cuts the graph (GF101)."""
import torch

a = torch.nn.Parameter(torch.rand(5))
a0 = a[0] * 2
a1 = torch.log(a[1] + 1)
a2 = a[2] ** 2
a3 = torch.nn.functional.softplus(a[3] * 2)
a4 = a[4]
A1 = torch.tensor([a0, a1, a2, a3, a4])  # the copy has no grad_fn
A1.sum().backward()  # RuntimeError: element 0 of tensors does not require grad
print(a.grad)
