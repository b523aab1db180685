"""torch.log(a)[a > 0.] indexes after the log: the excluded a = 0 still gets a nan gradient

source: https://github.com/pytorch/pytorch/issues/12986
symptom: nan-grad
rule: GF301
shape: module-level script: boolean-mask indexing applied to the output of a singular op
wrong: clamp-eps
why: replaces the -inf by 0 with torch.nan_to_num on the forward, but the backward of log at 0 still gives nan (0 * inf) for the masked entry
"""
import torch

a = torch.tensor([0., 1., 2.], requires_grad=True)
l = torch.nan_to_num(torch.log(a), neginf=0.)[a > 0.].sum()
l.backward()
print(a.grad)
