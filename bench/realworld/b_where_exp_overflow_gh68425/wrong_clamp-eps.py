"""torch.where(a <= 0, torch.exp(a), 1 + a) at a = 100: exp overflows in the unselected branch and the gradient is nan instead of 1

source: https://github.com/pytorch/pytorch/issues/68425
symptom: nan-grad
rule: GF302
shape: module-level script: a piecewise (ELU-like) function built with torch.where
wrong: clamp-eps
why: clamps the output of exp instead of its input, so the forward is finite but the clamp's zero gradient still meets exp's inf and gives nan
"""
import torch

a = torch.tensor(100., requires_grad=True)
b = torch.where(a <= 0, torch.exp(a).clamp(max=1e30), 1 + a)
b.backward()

print(b)
print(a.grad)
