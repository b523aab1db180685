"""PAFPN with ReLU in its ConvModules adds the top-down and bottom-up features in place (`laterals[i - 1] += ...`, `inter_outs[i + 1] += ...`), overwriting ReLU outputs that ReLU's backward needs, so backward raises the in-place modification error.

source: https://github.com/open-mmlab/mmdetection/pull/9450
symptom: error
rule: ?
shape: detection neck (PAFPN: lateral/fpn/downsample/pafpn ConvModules with ReLU, top-down upsampling path and bottom-up downsampling path) on a small backbone, per-level heads, one SGD step
"""
import torch
from torch import nn
import torch.nn.functional as F

torch.manual_seed(0)


class ConvModule(nn.Module):
    def __init__(self, cin, cout, k, stride=1):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, stride=stride, padding=k // 2)
        self.activate = nn.ReLU()

    def forward(self, x):
        return self.activate(self.conv(x))


class PAFPN(nn.Module):
    def __init__(self, in_channels=(8, 16, 32), out_channels=8):
        super().__init__()
        n = len(in_channels)
        self.lateral_convs = nn.ModuleList(ConvModule(c, out_channels, 1) for c in in_channels)
        self.fpn_convs = nn.ModuleList(ConvModule(out_channels, out_channels, 3) for _ in range(n))
        self.downsample_convs = nn.ModuleList(ConvModule(out_channels, out_channels, 3, stride=2) for _ in range(n - 1))
        self.pafpn_convs = nn.ModuleList(ConvModule(out_channels, out_channels, 3) for _ in range(n - 1))

    def forward(self, inputs):
        laterals = [conv(inputs[i]) for i, conv in enumerate(self.lateral_convs)]
        used_backbone_levels = len(laterals)
        for i in range(used_backbone_levels - 1, 0, -1):
            prev_shape = laterals[i - 1].shape[2:]
            laterals[i - 1] += F.interpolate(laterals[i], size=prev_shape, mode="nearest")  # bench: bug
        inter_outs = [self.fpn_convs[i](laterals[i]) for i in range(used_backbone_levels)]
        for i in range(0, used_backbone_levels - 1):
            inter_outs[i + 1] += self.downsample_convs[i](inter_outs[i])  # bench: bug
        outs = [inter_outs[0]]
        outs.extend(self.pafpn_convs[i - 1](inter_outs[i]) for i in range(1, used_backbone_levels))
        return tuple(outs)


class Backbone(nn.Module):
    def __init__(self):
        super().__init__()
        self.s1 = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.s2 = nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.s3 = nn.Conv2d(16, 32, 3, stride=2, padding=1)

    def forward(self, x):
        c1 = torch.relu(self.s1(x))
        c2 = torch.relu(self.s2(c1))
        return [c1, c2, torch.relu(self.s3(c2))]


backbone, neck = Backbone(), PAFPN()
head = nn.Conv2d(8, 1, 1)
params = list(backbone.parameters()) + list(neck.parameters()) + list(head.parameters())
opt = torch.optim.SGD(params, lr=0.01)
img = torch.randn(2, 3, 32, 32)
targets = [torch.rand(2, 1, 16 // 2 ** i, 16 // 2 ** i) for i in range(3)]
opt.zero_grad()
outs = neck(backbone(img))
loss = sum(F.mse_loss(head(o), t) for o, t in zip(outs, targets))
loss.backward()
opt.step()


def gnorm(p):
    return None if p.grad is None else round(p.grad.norm().item(), 4)


print("loss", round(loss.item(), 4))
print("grad fpn_convs[0]", gnorm(neck.fpn_convs[0].conv.weight))
print("grad backbone s1", gnorm(backbone.s1.weight))
