"""Overwrites one element of a sigmoid output, which sigmoid saved for its backward

source: https://github.com/pytorch/pytorch/issues/9391
symptom: error
rule: GF204
shape: script: `b = a.sigmoid()` then `b[1] = 2`
wrong: detach
why: writes through `b.data`, so sigmoid's backward reads the overwritten output and a[1] gets a wrong gradient
"""
import torch

a = torch.tensor([1, 2, 3.], requires_grad=True)
b = a.sigmoid()
b.data[1] = 2
b.sum().backward()
print([round(v, 4) for v in a.grad.tolist()])
