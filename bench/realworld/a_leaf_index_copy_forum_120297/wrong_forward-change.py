"""Overwrites a slice of a requires-grad leaf with `index_copy_` to inject new values

source: https://discuss.pytorch.org/t/inplace-operation-changes-is-leaf-attribute/120297
symptom: error
rule: GF201
shape: script on a 4-d leaf tensor created with requires_grad=True, in-place `index_copy_` along the last dim
wrong: forward-change
why: uses the out-of-place index_copy and discards its result, so c is never modified and the loss is computed on the old values
"""
import torch

torch.manual_seed(0)
c = torch.randn(10, 3, 2, 32, requires_grad=True)
print(c.is_leaf)
c.index_copy(3, torch.tensor(10), torch.randn(10, 3, 2, 1))
loss = (c ** 2).sum()
loss.backward()
print(round(loss.item(), 4), round(c.grad.norm().item(), 4))
