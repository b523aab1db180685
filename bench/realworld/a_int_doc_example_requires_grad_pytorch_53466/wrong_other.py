"""The torch.enable_grad docs example builds `torch.tensor([1], requires_grad=True)`, an integer tensor

source: https://github.com/pytorch/pytorch/issues/53466
symptom: error
rule: GF105
shape: documentation snippet: grad-mode context managers around `y = x * 2`, then backward
wrong: other
why: casts the integer leaf after requires_grad, so x is a non-leaf cast and x.grad stays None
"""
import torch

x = torch.tensor([1.], requires_grad=True).double()
with torch.no_grad():
    with torch.enable_grad():
        y = x * 2
print(y.requires_grad)
y.backward()
print(x.grad)
