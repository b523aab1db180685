"""y2 = torch.tensor([cosa, cosb]) copies the values: the matmul term built on y2 contributes nothing to a.grad and b.grad

source: https://discuss.pytorch.org/t/gradient-is-lost-when-use-torch-tensor-t1-t2/23261
symptom: wrong-value
rule: GF101
shape: module-level script: two scalar leaves, cosines assembled into a vector with torch.tensor, then matmul
"""
import torch
a = torch.tensor(0.5)
b = torch.tensor(1.0)
a.requires_grad = True
b.requires_grad = True
cosa = torch.cos(a)
cosb = torch.cos(b)
y1 = cosa + cosb
y2 = torch.tensor([  # bench: bug
cosa, cosb
])
mat = torch.tensor([
[1.0, 2.0],
[3.0, 4.0]
])
y2 = torch.matmul(y2, mat)
(y1 + y2.sum()).backward()
print("a has grad ", a.requires_grad)
print("a grad", round(a.grad.item(), 4))
print("b grad", round(b.grad.item(), 4))
