"""The model's _initialize_biases adds the objectness/class priors in place to a view of the Detect convs' bias Parameters, which autograd forbids on a leaf that requires grad.

source: https://github.com/hustvl/YOLOP/pull/17
symptom: error
rule: ?
shape: YOLO-style model: Detect head module (ModuleList of 1x1 convs) + model-level _initialize_biases that rewrites each conv bias in place and re-wraps it as a Parameter; then one training step
"""
import math

import torch
import torch.nn as nn

torch.manual_seed(0)


class Detect(nn.Module):
    def __init__(self, nc=1, ch=(8, 16)):
        super().__init__()
        self.nc, self.no, self.na = nc, nc + 5, 3
        self.stride = torch.tensor([8.0, 16.0])
        self.m = nn.ModuleList(nn.Conv2d(c, self.no * self.na, 1) for c in ch)

    def forward(self, xs):
        return [conv(x).view(x.shape[0], self.na, self.no, -1) for conv, x in zip(self.m, xs)]


class MCnet(nn.Module):
    def __init__(self):
        super().__init__()
        self.b1 = nn.Conv2d(3, 8, 3, 2, 1)
        self.b2 = nn.Conv2d(8, 16, 3, 2, 1)
        self.detect = Detect()
        self._initialize_biases()

    def _initialize_biases(self, cf=None):
        m = self.detect
        for mi, s in zip(m.m, m.stride):
            b = mi.bias.view(m.na, -1)
            b[:, 4] += math.log(8 / (640 / s) ** 2)  # bench: bug
            b[:, 5:] += math.log(0.6 / (m.nc - 0.99))  # bench: bug
            mi.bias = nn.Parameter(b.view(-1), requires_grad=True)

    def forward(self, x):
        f1 = torch.relu(self.b1(x))
        f2 = torch.relu(self.b2(f1))
        return self.detect([f1, f2])


model = MCnet()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(2, 3, 16, 16)
outs = model(x)
tobj = [torch.zeros_like(o[:, :, 4]) for o in outs]
tobj[0][:, 0, :3] = 1.0
loss = sum(nn.functional.binary_cross_entropy_with_logits(o[:, :, 4], t) for o, t in zip(outs, tobj))
opt.zero_grad()
loss.backward()
print("loss", round(loss.item(), 4))
print("bias0 grad", round(model.detect.m[0].bias.grad.norm().item(), 4))
print("b1 grad", round(model.b1.weight.grad.norm().item(), 4))
