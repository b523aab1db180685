"""FPN head adds the upsampled coarser level in place into a lateral that is a ReLU output

source: https://github.com/lyongo/NWPU-MOC/issues/4
symptom: error
rule: GF204
shape: nn.Module forward, top-down loop over a list of feature maps with `laterals[i - 1] += F.interpolate(...)`
wrong: dropped-term
why: removes the failing top-down addition, so the FPN levels no longer receive the upsampled coarser features
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class ConvModule(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, padding=0):
        super(ConvModule, self).__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=padding)
        self.activate = nn.ReLU()

    def forward(self, x):
        return self.activate(self.conv(x))


class FPN_Head(nn.Module):
    def __init__(self, in_channels, out_channels):
        super(FPN_Head, self).__init__()
        self.lateral_convs = nn.ModuleList()
        self.fpn_convs = nn.ModuleList()
        for in_c in in_channels:
            self.lateral_convs.append(ConvModule(in_c, out_channels, 1))
            self.fpn_convs.append(ConvModule(out_channels, out_channels, 3, padding=1))

    def forward(self, inputs):
        # build laterals
        laterals = [
            lateral_conv(inputs[i])
            for i, lateral_conv in enumerate(self.lateral_convs)
        ]

        # build top-down path
        used_backbone_levels = len(laterals)
        for i in range(used_backbone_levels - 1, 0, -1):
            prev_shape = laterals[i - 1].shape[2:]
            pass  # top-down merge removed: it raised the in-place error

        outs = [
            self.fpn_convs[i](laterals[i])
            for i in range(used_backbone_levels)
        ]
        return outs


torch.manual_seed(0)
head = FPN_Head([4, 8, 16], 8)
inputs = [torch.randn(1, 4, 16, 16), torch.randn(1, 8, 8, 8), torch.randn(1, 16, 4, 4)]
outs = head(inputs)
loss = sum(o.mean() for o in outs)
loss.backward()
print(round(loss.item(), 4), round(head.lateral_convs[2].conv.weight.grad.norm().item(), 4))
