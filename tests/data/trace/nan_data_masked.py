import torch

x = torch.zeros(2, requires_grad=True)
y = torch.tensor([0.0, float("nan")])
loss = torch.nn.functional.mse_loss(x, y, reduction="none")[~y.isnan()].sum()
loss.backward()
print(x.grad)
