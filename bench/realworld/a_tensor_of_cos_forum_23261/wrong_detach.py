"""Builds a vector with `torch.tensor([cosa, cosb])` from tensors that require grad, cutting the graph

source: https://discuss.pytorch.org/t/gradient-is-lost-when-use-torch-tensor-t1-t2/23261
symptom: error
rule: GF101
shape: script: scalar tensors combined with torch.tensor([...]) then a matmul and backward
wrong: detach
why: builds y2 as a new leaf with torch.tensor(..., requires_grad=True), so backward runs but nothing reaches a and b
"""
import torch
a = torch.tensor(0.5)
b = torch.tensor(0.3)
a.requires_grad = True
b.requires_grad = True
cosa = torch.cos(a)
cosb = torch.cos(b)
y1 = cosa + cosb
y2 = torch.tensor([
    cosa, cosb
], requires_grad=True)
mat = torch.tensor([
    [1.0, 2.0],
    [3.0, 4.0]
])
y2 = torch.matmul(y2, mat)
y2.sum().backward() # RuntimeError: element 0 of tensors does not require grad and does not have a grad_fn
print("a has grad ", a.requires_grad)
print("a grad", round(a.grad.item(), 4), "b grad", round(b.grad.item(), 4))
