"""Hand-written gradient descent `w -= lr * w.grad` without torch.no_grad()

source: https://hao-yiwen.github.io/yiwen-blog-website/en/docs/ai/frameworks/pytorch/common-errors
symptom: error
rule: GF201
shape: training loop with leaf tensors w, b created with requires_grad=True and a manual update
wrong: other
why: rebinds w and b to the out-of-place update, so they stop being leaves and their .grad is None at the zeroing
"""
import torch

torch.manual_seed(0)
X = torch.randn(64, 3)
y = X @ torch.tensor([2.0, -3.4, 1.0]) + 4.2

w = torch.normal(0, 0.01, size=(3,), requires_grad=True)
b = torch.zeros(1, requires_grad=True)
lr = 0.1

for epoch in range(10):
    pred = X @ w + b
    loss = ((pred - y) ** 2).mean()
    loss.backward()
    w = w - lr * w.grad
    b = b - lr * b.grad
    w.grad.zero_()
    b.grad.zero_()

print(round(loss.item(), 4), [round(v, 4) for v in w.tolist()])
