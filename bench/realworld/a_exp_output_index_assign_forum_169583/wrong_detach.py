"""Overwrites an element of an exp() output, which exp saved as its own gradient

source: https://discuss.pytorch.org/t/when-inplace-operation-are-allowed-and-when-not/169583/3
symptom: error
rule: GF204
shape: script: `uexp = u.exp()`, loss from uexp, then `uexp[0] = 666` before backward
wrong: detach
why: writes through `uexp.data`, so the version check is bypassed and exp's backward reads the overwritten output
"""
import torch

t = torch.arange (3.0, requires_grad = True)
u = 2 * t                             # (so it won't be a leaf variable)
uexp = u.exp()                        # uexp is the gradient of u.exp()
loss = uexp.sum()                     # (some dummy loss)
uexp.data[0] = 666                         # modification of a copy of uexp
loss.backward()
print([round(v, 4) for v in t.grad.tolist()])
