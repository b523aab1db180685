"""The FPN head's top-down pass adds the upsampled coarser map into the lateral feature in place (`laterals[i - 1] += ...`), but the laterals are ReLU outputs that ReLU's backward still needs, so backward raises the in-place modification error.

source: https://github.com/lyongo/NWPU-MOC/issues/4
symptom: error
rule: ?
shape: FPN neck (lateral conv+ReLU modules, top-down nearest upsampling, output convs) feeding a density-map head, MSE loss, one step
"""
import torch
from torch import nn
import torch.nn.functional as F

torch.manual_seed(0)


class ConvModule(nn.Module):
    def __init__(self, cin, cout, k):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, padding=k // 2)
        self.act = nn.ReLU()

    def forward(self, x):
        return self.act(self.conv(x))


class FPNHead(nn.Module):
    def __init__(self, in_channels=(8, 16, 32), out_channels=8):
        super().__init__()
        self.lateral_convs = nn.ModuleList(ConvModule(c, out_channels, 1) for c in in_channels)
        self.fpn_convs = nn.ModuleList(ConvModule(out_channels, out_channels, 3) for _ in in_channels)
        self.density = nn.Conv2d(out_channels, 1, 1)

    def forward(self, inputs):
        laterals = [conv(inputs[i]) for i, conv in enumerate(self.lateral_convs)]
        for i in range(len(laterals) - 1, 0, -1):
            prev_shape = laterals[i - 1].shape[2:]
            laterals[i - 1] += F.interpolate(laterals[i], size=prev_shape, mode="nearest")  # bench: bug
        outs = [self.fpn_convs[i](laterals[i]) for i in range(len(laterals))]
        return self.density(outs[0])


class Backbone(nn.Module):
    def __init__(self):
        super().__init__()
        self.s1 = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.s2 = nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.s3 = nn.Conv2d(16, 32, 3, stride=2, padding=1)

    def forward(self, x):
        c1 = torch.relu(self.s1(x))
        c2 = torch.relu(self.s2(c1))
        c3 = torch.relu(self.s3(c2))
        return [c1, c2, c3]


backbone, head = Backbone(), FPNHead()
params = list(backbone.parameters()) + list(head.parameters())
opt = torch.optim.SGD(params, lr=0.01)
img = torch.randn(2, 3, 32, 32)
target = torch.rand(2, 1, 16, 16)
opt.zero_grad()
loss = F.mse_loss(head(backbone(img)), target)
loss.backward()
opt.step()
print("loss", round(loss.item(), 4))


def gnorm(p):
    return None if p.grad is None else round(p.grad.norm().item(), 4)


print("grad lateral2", gnorm(head.lateral_convs[2].conv.weight))
print("grad backbone s3", gnorm(backbone.s3.weight))
