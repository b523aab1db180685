"""y = ||x|| * cos(2 * acos(cos_theta)): gradients turn nan once a cosine reaches +-1, the algebraic form 2cos^2-1 is stable

source: https://discuss.pytorch.org/t/nan-gradient-for-torch-cos-torch-acos/9617
symptom: nan-grad
rule: none
shape: module-level forward computation of an angular-margin layer (x.mm(w) normalised, clamped, acos)
wrong: clamp-eps
why: keeps acos and replaces the nan gradients by 0 with torch.nan_to_num, which also wipes the valid part of those entries (the gradient through ||x||)
"""
import torch

torch.manual_seed(0)
x = torch.randn(4, 3)
x[0] = torch.tensor([1.0, 2.0, 2.0])
w = torch.cat([x[:1].t() * 2.0, torch.randn(3, 2)], 1)  # one class vector parallel to a sample
x.requires_grad_()
w.requires_grad_()

xlen = x.pow(2).sum(1).pow(0.5).view(-1, 1)  # ||x||
wlen = w.pow(2).sum(0).pow(0.5).view(1, -1)  # ||w||
cos_theta = (x.mm(w) / xlen / wlen).clamp(-1, 1)
theta = cos_theta.acos()
cos_2_theta = torch.cos(2*theta)
y = cos_2_theta * xlen.view(-1, 1)

y.sum().backward()
x.grad = torch.nan_to_num(x.grad)  # drop the nan from acos at |cos| = 1
w.grad = torch.nan_to_num(w.grad)
print(round(y.sum().item(), 4))
print("x.grad has nan:", bool(torch.isnan(x.grad).any()))
print("w.grad has nan:", bool(torch.isnan(w.grad).any()))
