import torch

w = torch.randn(3, requires_grad=True)
x = w * 1
y = x.pow(2)
x /= 2
(y + x).sum().backward()
