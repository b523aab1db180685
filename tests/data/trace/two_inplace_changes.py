import torch

w = torch.randn(4, requires_grad=True)
a = torch.sigmoid(w)
b = torch.tanh(w)
a *= 2
b += 1
(a * b).sum().backward()
print(w.grad is not None)
