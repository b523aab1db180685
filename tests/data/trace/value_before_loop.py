import torch

t = torch.eye(2, requires_grad=True)
a = torch.ones(2, requires_grad=True)
y = t @ a  # made once, before the loop
for step in range(2):
    out = t @ (torch.ones(2) + y)
    out.pow(2).sum().backward()
print([round(v, 4) for v in a.grad.tolist()])
