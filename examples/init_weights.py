"""Seed 001: initialising a leaf in place raises at once (GF201)."""
import torch

w = torch.FloatTensor(10)
w.requires_grad = True
w.normal_()  # RuntimeError: a leaf Variable that requires grad ...

x = torch.linspace(0.0, 1.0, 10)
(w * x).sum().backward()
print(w.grad)
