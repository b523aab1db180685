"""The weight is created with requires_grad=True and then moved with `.to(...)`, so `w` is the non-leaf result of the copy, its .grad stays None, and the hand-written SGD step (which, like torch.optim, skips tensors whose .grad is None) never updates it.

source: https://blog.youkuaiyun.com/fengyu7789/article/details/123215466
symptom: none-grad
rule: ?
shape: flat linear-regression script with a hand-written SGD loop over a list of tensors, several steps
"""
import torch

torch.manual_seed(123)

# stand-in: on this CPU-only machine `.to(device)` is a no-op, so a dtype copy plays the device copy
device = torch.device('cpu')
dtype = torch.float64

x = torch.rand(10, 3).to(device=device, dtype=dtype)
y = x @ torch.tensor([[1.0], [-2.0], [0.5]], dtype=dtype) + 0.3
w = torch.rand(3, 1, requires_grad=True, device=device, dtype=dtype)
b = torch.zeros(1, requires_grad=True, device=device, dtype=dtype)
params = [w, b]
lr = 0.5

for step in range(20):
    t = ((x @ w + b - y) ** 2).mean()
    t.backward()
    with torch.no_grad():
        for p in params:
            if p.grad is not None:
                p -= lr * p.grad
                p.grad.zero_()

print("loss", round(t.item(), 4))
print("w.grad", None if w.grad is None else round(w.grad.norm().item(), 4))
print("w norm", round(w.norm().item(), 4))
