import torch


def normalize(x):
    x /= x.norm()  # the caller's op saved x: called through a table, no analysis follows it
    return x


STEPS = {"normalize": normalize}
w = torch.randn(3, requires_grad=True)
h = w * 2
y = h.pow(2)
z = STEPS["normalize"](h)
(y + z).sum().backward()
print(w.grad is not None)
