import torch


def normalize(x):
    x /= x.norm()  # the caller's op saved x: no static analysis of this function sees it
    return x


w = torch.randn(3, requires_grad=True)
h = w * 2
y = h.pow(2)
z = normalize(h)
(y + z).sum().backward()
print(w.grad is not None)
