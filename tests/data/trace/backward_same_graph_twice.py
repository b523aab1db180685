import torch

w = torch.randn(3, requires_grad=True)
loss = (w.exp() * 2).sum()
loss.backward()
loss.backward()
print([round(v, 4) for v in w.grad.tolist()])
