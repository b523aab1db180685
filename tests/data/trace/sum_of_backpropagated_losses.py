import torch

w = torch.randn(3, requires_grad=True)
for step in range(3):
    first = (w * 2).sum()
    first.backward()
    second = (w * w).sum()
    second.backward()
    both = first + second  # rebound each step: no graph outlives its step
print(float(both))
