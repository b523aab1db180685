"""Every parameter was frozen (`param.requires_grad = False`) before training, so the output has no grad_fn

source: https://duoke360.com/post/35061
symptom: error
rule: none
shape: script: model parameters frozen in a loop left over from feature extraction, then forward and backward
wrong: no-grad
why: leaves the parameters frozen and marks the output as requiring grad, so backward runs but the weight gets no gradient
"""
import torch

torch.manual_seed(0)
model = torch.nn.Linear(1, 1)
for param in model.parameters():
    param.requires_grad = False

out = model(torch.tensor([1.0]))
out.requires_grad_()
out.backward()
print(round(out.item(), 4), model.weight.grad)
