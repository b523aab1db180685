"""Weights created with requires_grad=True and then cast/moved (.double() here, .cuda() in the thread) are no longer leaves: .grad stays None and they never train

source: https://discuss.pytorch.org/t/how-to-define-a-leaf-tensor-in-pytorch-0-4-1/28461
symptom: none-grad
rule: GF103
shape: module-level linear regression with hand-made weights and a manual SGD step; the copy op (.cuda() in the thread) is .double() so it shows on CPU
wrong: detach
why: detaches the cast weight to make it a leaf, so it no longer requires grad and w is never trained
"""
import numpy as np
import torch

np.random.seed(0)
torch.manual_seed(0)  # (added: the report draws w unseeded; the measure needs one result)
X = torch.from_numpy(np.random.randn(16, 3))  # float64 data from numpy
y = X @ torch.tensor([[1.0], [-2.0], [0.5]], dtype=torch.float64)

w = torch.randn(3, 1, requires_grad=True).double().detach()
b = torch.zeros(1, dtype=torch.float64, requires_grad=True)

lr = 0.1
for step in range(5):
    loss = ((X @ w + b - y) ** 2).mean()
    loss.backward()
    with torch.no_grad():
        if w.grad is not None:
            w -= lr * w.grad
            w.grad.zero_()
        b -= lr * b.grad
        b.grad.zero_()

print("w is leaf:", w.is_leaf)
print("w.grad is None:", w.grad is None)
print("loss:", round(loss.item(), 4))
