"""Basic autograd tutorial creates x, w, b as integer scalars with requires_grad=True

source: https://github.com/yunjey/pytorch-tutorial/pull/128
symptom: error
rule: GF105
shape: tutorial script: three scalar tensors from int literals, `y = w * x + b`, backward, print grads
wrong: no-grad
why: drops requires_grad from the input x instead of making it a float, so x.grad is None where the tutorial expects 2
"""
import torch

# ================================================================== #
#                     1. Basic autograd example 1                    #
# ================================================================== #

# Create tensors.
x = torch.tensor(1.)
w = torch.tensor(2., requires_grad=True)
b = torch.tensor(3., requires_grad=True)

# Build a computational graph.
y = w * x + b    # y = 2 * x + 3

# Compute gradients.
y.backward()

# Print out the gradients.
print(x.grad)    # x.grad = 2
print(w.grad)    # w.grad = 1
print(b.grad)    # b.grad = 1
