"""torch.where(x <= x_th, torch.exp(x), b) meant to protect against overflow still gives nan gradients for the nan and 1e10 inputs

source: https://github.com/pytorch/pytorch/issues/156212
symptom: nan-grad
rule: GF302
shape: module-level script: a clamp-like where guarding exp against large and nan inputs
wrong: clamp-eps
why: clamps the output of exp at exp(x_th) instead of guarding its input, so the clamp's zero gradient still meets exp's inf and nan and the gradient stays nan
"""
import torch

# some arbitrary max value for sth similar to torch.clamp(x, max=x_th)
x_th=torch.tensor(10)

# nan value, just for this experiment
x = torch.tensor([1.0, float('nan'), 1e10], requires_grad=True)

# some arbitrary secondary path, for showcase
b = torch.tensor(1)

# this never selects nan and protects against overflows
x_out = torch.where(x <= x_th, torch.exp(x).clamp(max=torch.exp(x_th.float())), b)

print(x_out)

l = x_out.sum()
l.backward()

print(x.grad)
