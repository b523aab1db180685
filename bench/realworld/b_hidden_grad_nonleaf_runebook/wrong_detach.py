"""Inspecting a hidden layer's gradient through y.grad after backward(): None, because y is an intermediate (non-leaf) tensor

source: https://runebook.dev/en/docs/pytorch/generated/torch.tensor.retain_grad
symptom: none-grad
rule: GF106
shape: debugging script: leaf input, intermediate activations, sum as output, .grad read on the intermediate
wrong: detach
why: makes y a new leaf with `.detach().requires_grad_()`, so y.grad is filled but the graph to x is cut and x.grad is None
"""
import torch

torch.manual_seed(0)
# Create a leaf tensor
x = torch.randn(1, 10, requires_grad=True)

# Intermediate non-leaf tensors
y = (x * 2).detach().requires_grad_()
z = y.relu()

# A final tensor
output = z.sum()

# Perform the backward pass
output.backward()

# Try to access the gradients
print(f"Gradients of x (leaf): {x.grad is not None}")
print(f"Gradients of y (non-leaf): {y.grad}")
