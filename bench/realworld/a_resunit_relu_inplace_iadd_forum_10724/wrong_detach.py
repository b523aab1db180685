"""Residual unit adds the residual in place into the tensor conv_1 saved for backward

source: http://discuss.pytorch.org/t/in-place-operation-and-resnet/10724
symptom: error
rule: GF204
shape: nn.Module residual unit with F.relu(inplace=True) and `x += residual`
wrong: detach
why: adds the residual to a detached x, so the identity path carries no gradient back to conv_0/bn_0
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


# implementation 1
class ResidualUnitA(nn.Module):
    def __init__(self):
        super(ResidualUnitA, self).__init__()
        self.conv_0 = nn.Conv2d(3, 24, 3, padding=1, bias=False)
        self.bn_0 = nn.BatchNorm2d(24)
        self.conv_1 = nn.Conv2d(24, 24, 3, padding=1, bias=False)
        self.bn_1 = nn.BatchNorm2d(24)

    def forward(self, x):
        x = self.conv_0(x)
        x = self.bn_0(x)
        x = F.relu(x, inplace=True)

        residual = self.conv_1(x)
        residual = self.bn_1(residual)
        x = x.detach() + residual
        x = F.relu(x, inplace=True)

        return x


torch.manual_seed(0)
unit = ResidualUnitA()
inp = torch.randn(2, 3, 8, 8)
out = unit(inp)
loss = out.mean()
loss.backward()
print(round(loss.item(), 4), round(unit.conv_1.weight.grad.norm().item(), 4))
