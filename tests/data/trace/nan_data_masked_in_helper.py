import torch


def loss_fn(prediction, target):
    return torch.square(prediction - target)


w = torch.ones(2, requires_grad=True)
y = torch.tensor([float("nan"), 0.0])
loss = loss_fn(w * 2, y)[~y.isnan()]  # masked where it is used, not inside the helper
loss.sum().backward()
print(w.grad)
