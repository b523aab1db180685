import torch

x = torch.tensor([-1.0, 4.0], requires_grad=True)
y = torch.where(x > 0, torch.sqrt(x), torch.zeros_like(x))  # nan gradient from sqrt
y.sum().backward()
print(x.grad)
