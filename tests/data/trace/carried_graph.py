import torch

w = torch.randn(3, 3, requires_grad=True)
h = torch.zeros(3)
for step in range(3):
    h = torch.tanh(w @ h + 1)  # carries the graph into the next step
    loss = h.sum()
    loss.backward()  # GF401 at the second step
