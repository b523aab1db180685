"""Reading loss.grad and out.grad after backward(): both are None because they are non-leaf tensors (no retain_grad)

source: https://discuss.pytorch.org/t/loss-grad-is-constant-1/130964
symptom: none-grad
rule: GF106
shape: module-level mini tutorial: nn.Linear forward, squared output as loss, inspecting .grad of intermediates
wrong: detach
why: re-creates out as a leaf with `.detach().requires_grad_()`, so out.grad and loss.grad are filled but the model and y get no gradient
"""
import torch
from torch import nn

torch.manual_seed(0)
model = nn.Linear(1, 1)

y = torch.randn(1, 1, requires_grad=True)
# Forward pass, compute loss
out = model(y).detach().requires_grad_()
loss = out**2
loss.retain_grad()
loss.backward()
print(y.grad is None)  # False: y is a leaf
print(out.grad)
print(loss.grad)
