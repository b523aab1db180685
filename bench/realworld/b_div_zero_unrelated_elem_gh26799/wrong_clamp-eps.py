"""weight / divide_tensor with a 0 divisor, then only tmp[0] is used: the unrelated element gets a nan gradient

source: https://github.com/pytorch/pytorch/issues/26799
symptom: nan-grad
rule: GF301
shape: module-level script: elementwise division by a constant tensor with zeros, one element indexed afterwards
wrong: clamp-eps
why: adds an eps to the whole divisor, which biases the used quotient and its gradient (1/1.001 instead of 1)
"""
import torch
divide_tensor = torch.Tensor([1.0, 0.0, 1.0])
weight = torch.ones(3)
weight.requires_grad = True
tmp = weight / (divide_tensor + 1e-3)
loss = tmp[0]
loss.backward()
print(weight.grad)
