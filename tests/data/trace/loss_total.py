import torch

w = torch.randn(3, requires_grad=True)
total = 0
for i in range(3):
    loss = (w * i).sum()
    loss.backward()
    total += loss  # GF403
print(float(total))
