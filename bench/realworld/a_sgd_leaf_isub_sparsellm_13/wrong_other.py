"""Gradient step on a leaf tensor with `s_batch -= s_learning_rate * s_batch.grad` outside no_grad

source: https://github.com/BaiTheBest/SparseLLM/issues/13
symptom: error
rule: GF201
shape: optimisation loop over chunks of an auxiliary variable, manual update then `.grad.zero_()`
wrong: other
why: rebinds s_batch to the out-of-place update, so it stops being a leaf and its .grad is None at the next step
"""
import torch

torch.manual_seed(0)
W = torch.randn(16, 8)
target = torch.randn(16, 12)
s = torch.randn(8, 12)
s_learning_rate = 0.01

for chunk in (slice(0, 6), slice(6, 12)):
    s_batch = s[:, chunk].clone().requires_grad_(True)
    for step in range(5):
        loss_s = ((W @ s_batch - target[:, chunk]) ** 2).mean()
        loss_s.backward()
        s_batch = s_batch - s_learning_rate * s_batch.grad
        s_batch.grad.zero_()
    s[:, chunk] = s_batch.detach().to(dtype=torch.float16).float()

print(round(loss_s.item(), 4), round(s.norm().item(), 4))
