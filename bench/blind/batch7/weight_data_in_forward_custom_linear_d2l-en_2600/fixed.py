"""The custom MyLinear layer computes its forward from self.weight.data and self.bias.data, which are graph-less aliases, so the layer's Parameters get .grad None and never train while the rest of the network does.

source: https://github.com/d2l-ai/d2l-en/pull/2600
symptom: none-grad
rule: ?
shape: custom nn.Module layer with Parameters inside an nn.Sequential MLP, one SGD step
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class MyLinear(nn.Module):
    def __init__(self, in_units, units):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(in_units, units))
        self.bias = nn.Parameter(torch.randn(units))

    def forward(self, X):
        linear = torch.matmul(X, self.weight) + self.bias
        return F.relu(linear)


net = nn.Sequential(MyLinear(8, 16), nn.Linear(16, 1))
opt = torch.optim.SGD(net.parameters(), lr=0.05)
X = torch.randn(10, 8)
y = torch.randn(10, 1)
opt.zero_grad()
loss = F.mse_loss(net(X), y)
loss.backward()
opt.step()
g = net[0].weight.grad
print("loss", round(loss.item(), 4))
print("mylinear grad", None if g is None else round(g.norm().item(), 4))
print("head grad", round(net[1].weight.grad.norm().item(), 4))
