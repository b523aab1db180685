import torch

w = torch.randn(3, requires_grad=True)
h = w * 2
out = (h * 3).sum()
out.backward()
print(h.grad)
print(out.grad)
