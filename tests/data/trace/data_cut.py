import torch

w = torch.randn(3, requires_grad=True)
b = torch.randn(3, requires_grad=True)
x = torch.ones(3)
out = (x * w.data).sum() + b.sum()  # GF205: w never gets a gradient
out.backward()
print(w.grad)
