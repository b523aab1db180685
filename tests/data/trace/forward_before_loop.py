import torch

w = torch.randn(3, requires_grad=True)
x = torch.randn(3)
hidden = torch.tanh(x * w)  # the forward runs once, before the loop
loss = hidden.pow(2).sum()
for step in range(3):
    w.grad = None
    loss.backward()
    w.data -= 0.1 * w.grad
print(round(loss.item(), 4))
