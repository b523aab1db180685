"""The user sets a conv layer's weights element by element with `m.weight[i, j, k, l] = v`, an in-place write into a leaf Parameter that requires grad.

source: https://github.com/YutaroOgawa/pytorch_advanced/issues/160
symptom: error
rule: ?
shape: notebook cell: hand-initialised nn.Conv2d (1 -> 1, 2x2, no bias) followed by a 1x1 conv head, then a few SGD steps fitting a target convolution
"""
import torch
import torch.nn as nn

torch.manual_seed(0)

m = nn.Conv2d(1, 1, 2, stride=1, bias=False)
m.weight[0, 0, 0, 0] = 1  # bench: bug
m.weight[0, 0, 0, 1] = 2  # bench: bug
m.weight[0, 0, 1, 0] = 3  # bench: bug
m.weight[0, 0, 1, 1] = 4  # bench: bug

x = torch.randn(8, 1, 5, 5)
target_w = torch.tensor([[[[1.5, 1.0], [2.5, 3.0]]]])
y = nn.functional.conv2d(x, target_w)
head = nn.Conv2d(1, 1, 1)
opt = torch.optim.SGD(list(m.parameters()) + list(head.parameters()), lr=0.02)
for step in range(20):
    opt.zero_grad()
    loss = ((head(m(x)) - y) ** 2).mean()
    loss.backward()
    opt.step()
print("loss", round(loss.item(), 4))
print("weight_sum", round(m.weight.sum().item(), 4))
print("head_w", round(head.weight.sum().item(), 4))
print("weight_00", round(m.weight[0, 0, 0, 0].item(), 4))
