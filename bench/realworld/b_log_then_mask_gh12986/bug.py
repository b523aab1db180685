"""torch.log(a)[a > 0.] indexes after the log: the excluded a = 0 still gets a nan gradient

source: https://github.com/pytorch/pytorch/issues/12986
symptom: nan-grad
rule: GF301
shape: module-level script: boolean-mask indexing applied to the output of a singular op
"""
import torch

a = torch.tensor([0., 1., 2.], requires_grad=True)
l = torch.log(a)[a > 0.].sum()  # bench: bug
l.backward()
print(a.grad)
