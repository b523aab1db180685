"""The user reads .grad of the conv output y after backward, but y is a non-leaf tensor whose gradient autograd does not keep, so y.grad is None.

source: https://github.com/pytorch/pytorch/issues/2677
symptom: none-grad
rule: ?
shape: script: input x (requires grad) -> nn.Conv2d -> sum; backward; inspect the gradient of the intermediate activation y (for a saliency-style map) next to x.grad
wrong: detach
why: re-creating y as a detached leaf with requires_grad_() makes y.grad appear, but it cuts the conv out of the graph, so x.grad and the conv's gradients are never computed.
"""
import torch
import torch.nn as nn

torch.manual_seed(0)

x = torch.rand(8, 1, 5, 5, requires_grad=True)
conv = nn.Conv2d(1, 1, 3)
y = conv(x).detach().requires_grad_()
final = torch.sum(y * y)
final.backward()
print("y.grad", None if y.grad is None else round(y.grad.norm().item(), 4))
print("x.grad", None if x.grad is None else round(x.grad.norm().item(), 4))
print("conv grad", None if conv.weight.grad is None else round(conv.weight.grad.norm().item(), 4))
