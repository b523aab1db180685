"""MSELoss(reduction="none") computed on targets with nan, then masked: the masked-out element still gets a nan gradient

source: https://github.com/pytorch/pytorch/issues/121416
symptom: nan-grad
rule: GF301
shape: module-level script: elementwise loss module, boolean mask applied to the loss instead of to its inputs
wrong: other
why: masks the elementwise loss with torch.where instead of indexing the inputs, so the nan target still reaches the backward and x.grad keeps a nan
"""
import torch
from torch import nn

L = nn.MSELoss(reduction="none")  # Same result with SmoothL1Loss or HuberLoss

x = torch.zeros(2, requires_grad=True)
y = torch.Tensor([0, torch.nan])
mask = torch.logical_not(torch.isnan(y))

loss = L(x[mask], y[mask]).sum()
loss.backward()
print(x.grad)  # tensor([0., 0.]) -> expected result

x.grad = None
loss = torch.where(mask, L(x, y), torch.zeros_like(x)).sum()
loss.backward()
print(x.grad)  # tensor([0., nan]) -> unexpected
