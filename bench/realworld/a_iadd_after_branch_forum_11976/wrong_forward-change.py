"""Adds a skip term in place to a conv output that a second conv branch already used

source: https://discuss.pytorch.org/t/when-would-the-error-one-of-the-variables-needed-for-gradient-computation-has-been-modified-occur/11976/2
symptom: error
rule: GF204
shape: nn.Module forward that bifurcates the data flow after conv1, then `x += some_layer`
wrong: forward-change
why: moves the in-place add before the branch, so conv1_p now sees x + some_layer instead of conv1's output
"""
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super(Net, self).__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.conv1_p = nn.Conv2d(8, 8, 3, padding=1)
        self.side = nn.Conv2d(3, 8, 1)

    def forward(self, input):
        some_layer = self.side(input)
        x = self.conv1(input)  # main branch
        x += some_layer  # main branch
        x_p = self.conv1_p(x)  # another branch
        return x + x_p


torch.manual_seed(0)
net = Net()
input = torch.randn(2, 3, 8, 8)
out = net(input)
loss = out.pow(2).mean()
loss.backward()
print(round(loss.item(), 4), round(net.conv1.weight.grad.norm().item(), 4))
