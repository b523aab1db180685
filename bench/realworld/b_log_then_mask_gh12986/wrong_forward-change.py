"""torch.log(a)[a > 0.] indexes after the log: the excluded a = 0 still gets a nan gradient

source: https://github.com/pytorch/pytorch/issues/12986
symptom: nan-grad
rule: GF301
shape: module-level script: boolean-mask indexing applied to the output of a singular op
wrong: forward-change
why: switches to log1p so that the masked-out 0 gives a finite value, which changes the function (log(1 + a) instead of log(a)) and its gradient on the kept entries
"""
import torch

a = torch.tensor([0., 1., 2.], requires_grad=True)
l = torch.log1p(a)[a > 0.].sum()
l.backward()
print(a.grad)
