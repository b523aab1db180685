"""torch.where selects the identity branch everywhere, yet the unselected sqrt of negative inputs makes every gradient nan

source: https://github.com/pytorch/pytorch/issues/187297
symptom: nan-grad
rule: GF302
shape: module-level script: torch.where(cond, torch.sqrt(x), x) summed and backpropagated
wrong: clamp-eps
why: keeps sqrt under where and replaces the nan gradient by 0 with torch.nan_to_num, which also wipes the valid gradient 1 of the xt branch
"""
import torch

xt = torch.tensor([-1.0, -4.0], dtype=torch.float32, requires_grad=True)

y = torch.where(xt > 0, torch.sqrt(xt), xt).sum()
y.backward()
xt.grad = torch.nan_to_num(xt.grad)  # sqrt of the negative entries gives nan

actual = xt.grad
expected = torch.tensor([1.0, 1.0], dtype=torch.float32)

print("actual:")
print(actual)
print("expected:")
print(expected)
