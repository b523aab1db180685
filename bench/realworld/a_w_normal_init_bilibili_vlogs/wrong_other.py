"""Initialises a hand-made weight with `w.normal_()` after setting `w.requires_grad = True`

source: https://github.com/chunhuizhang/bilibili_vlogs
symptom: error
rule: GF201
shape: notebook-style script: `w = torch.FloatTensor(10)`, `w.requires_grad = True`, `w.normal_()`, then a fit loop
wrong: other
why: initialises a clone of w, so the trained w is a non-leaf whose .grad is None in the update
"""
import torch

torch.manual_seed(0)
w = torch.FloatTensor(10) # w 是个 leaf tensor
w.requires_grad = True    # 将 requires_grad 设置为 True
# inplace operation
w = w.clone().normal_()

x = torch.randn(32, 10)
y = x @ torch.linspace(-1, 1, 10)
for step in range(20):
    loss = ((x @ w - y) ** 2).mean()
    loss.backward()
    with torch.no_grad():
        w -= 0.05 * w.grad
        w.grad.zero_()
print(round(loss.item(), 4), round(w.norm().item(), 4))
