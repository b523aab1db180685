"""Xception unit keeps `self.activ = nn.ReLU(inplace=True)` and applies it to the input the identity conv saved

source: https://github.com/osmr/imgclsmob/issues/13
symptom: error
rule: GF204
shape: nn.Module with the in-place activation held as a module attribute, used in forward after a branch
wrong: detach
why: keeps the in-place ReLU and feeds `x.data` to the identity conv, so the identity path carries no gradient to the stem and its saved input is overwritten by the ReLU
"""
import torch
import torch.nn as nn


class XceptionUnit(nn.Module):
    def __init__(self, in_channels, out_channels):
        super(XceptionUnit, self).__init__()
        self.resize_identity = (in_channels != out_channels)
        if self.resize_identity:
            self.identity_conv = nn.Conv2d(in_channels, out_channels, kernel_size=1, bias=False)
        self.activ = nn.ReLU(inplace=True)
        self.body = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1, bias=False)

    def forward(self, x):
        if self.resize_identity:
            identity = self.identity_conv(x.data)
        else:
            identity = x
        x = self.activ(x)
        x = self.body(x)
        x = x + identity
        return x


class Net(nn.Module):
    def __init__(self):
        super(Net, self).__init__()
        self.stem = nn.Conv2d(3, 8, kernel_size=3, padding=1)
        self.unit = XceptionUnit(8, 16)

    def forward(self, x):
        return self.unit(self.stem(x))


torch.manual_seed(0)
model = Net()
x = torch.randn(2, 3, 8, 8)
loss = model(x).pow(2).mean()
loss.backward()
print(round(loss.item(), 4), round(model.stem.weight.grad.norm().item(), 4))
