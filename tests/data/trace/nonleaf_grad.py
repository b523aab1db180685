import torch

a = torch.randn(3, requires_grad=True)
b = a * a
b.sum().backward()
print(b.grad)  # GF106
