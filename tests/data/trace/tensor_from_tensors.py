import torch

a = torch.randn(2, requires_grad=True)
b = a * 2
c = torch.tensor([b[0], b[1]])  # GF101: the graph is cut
loss = (c * 3).sum()
loss.backward()
