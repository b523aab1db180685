import torch

w = torch.randn(3, requires_grad=True) / 2  # the leaf is lost: `w` is the quotient
x = torch.ones(3)
(w * x).sum().backward()
print(w.grad)
