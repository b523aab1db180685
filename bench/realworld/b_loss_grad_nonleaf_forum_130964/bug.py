"""Reading loss.grad and out.grad after backward(): both are None because they are non-leaf tensors (no retain_grad)

source: https://discuss.pytorch.org/t/loss-grad-is-constant-1/130964
symptom: none-grad
rule: GF106
shape: module-level mini tutorial: nn.Linear forward, squared output as loss, inspecting .grad of intermediates
"""
import torch
from torch import nn

torch.manual_seed(0)
model = nn.Linear(1, 1)

y = torch.randn(1, 1, requires_grad=True)
# Forward pass, compute loss
out = model(y)
loss = out**2
loss.backward()
print(y.grad is None)  # False: y is a leaf
print(out.grad)  # bench: bug
print(loss.grad)  # bench: bug
