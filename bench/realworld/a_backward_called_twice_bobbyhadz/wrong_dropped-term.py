"""Calls backward() twice on the same loss to accumulate gradients, without retain_graph on the first call

source: https://bobbyhadz.com/blog/runtime-error-trying-to-backward-through-the-graph-a-second-time
symptom: error
rule: GF401
shape: script: Linear layer, CrossEntropyLoss with probability targets, two consecutive `computed_loss.backward()`
wrong: dropped-term
why: drops the second backward call, so the gradient is accumulated once instead of twice
"""
import torch

torch.manual_seed(0)
in_dim, out_dim = (5, 2)

inputs = torch.randn(in_dim)
target = torch.tensor([1, 2], dtype=torch.float32)

model = torch.nn.Linear(in_dim, out_dim, bias=True)

out = model(inputs)

loss = torch.nn.CrossEntropyLoss()

computed_loss = loss(out, target)

computed_loss.backward()

for p in model.parameters():
    print([round(v, 4) for v in p.grad.flatten().tolist()])
