"""Computes the coordinate loss from argmax bin indices of the network output, which have no gradient

source: https://github.com/LZGMatrix/BOP19_CDPN_2019ICCV/issues/4
symptom: error
rule: none
shape: training step adapted from test code: per-axis `torch.argmax` over bins, rescaled to [-1, 1], then an L1 loss
wrong: forward-change
why: regresses the peak logit value (max) instead of the expected bin index, so the loss measures a different quantity
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class CoorHead(nn.Module):
    def __init__(self, coor_bin=64):
        super().__init__()
        self.coor_bin = coor_bin
        self.conv = nn.Conv2d(8, 3 * (coor_bin + 1), 1)

    def forward(self, feat):
        out = self.conv(feat)
        return out.split(self.coor_bin + 1, dim=1)


class cfg:
    class network:
        coor_bin = 64


torch.manual_seed(0)
head = CoorHead(cfg.network.coor_bin)
feat = torch.randn(1, 8, 4, 4)
gt_coor = torch.rand(4, 4, 3) * 2 - 1

output_coor_x_, output_coor_y_, output_coor_z_ = head(feat)
output_coor_x_ = output_coor_x_.squeeze()
output_coor_y_ = output_coor_y_.squeeze()
output_coor_z_ = output_coor_z_.squeeze()

####

output_coor_ = torch.stack([torch.max(output_coor_x_, axis=0).values,
                         torch.max(output_coor_y_, axis=0).values,
                         torch.max(output_coor_z_, axis=0).values], axis=2)
output_coor_ = 2.0 * output_coor_ / (63.0-1.0) - 1.0      # [-1,1]

loss = F.l1_loss(output_coor_, gt_coor)
loss.backward()
print(round(loss.item(), 4), round(head.conv.weight.grad.norm().item(), 4))
