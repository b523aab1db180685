"""The SIoU branch of IOUloss divides by sigma = (s_cw**2 + s_ch**2)**0.5 with no eps, so a predicted box whose centre coincides with its target's gives 0/0 and an infinite pow derivative, and the regression head's gradients are nan.

source: https://github.com/meituan/YOLOv6/issues/226
symptom: nan-grad
rule: ?
shape: detector box head (nn.Linear predicting xyxy offsets) + IOUloss module with iou_type='siou'; one step where one predicted box is concentric with its target
"""
import math

import torch
import torch.nn as nn

torch.manual_seed(0)


class IOUloss(nn.Module):
    def __init__(self, iou_type="siou", eps=1e-7):
        super().__init__()
        self.iou_type, self.eps = iou_type, eps

    def forward(self, box1, box2):
        b1_x1, b1_y1, b1_x2, b1_y2 = box1.unbind(-1)
        b2_x1, b2_y1, b2_x2, b2_y2 = box2.unbind(-1)
        inter = (torch.min(b1_x2, b2_x2) - torch.max(b1_x1, b2_x1)).clamp(0) * (
            torch.min(b1_y2, b2_y2) - torch.max(b1_y1, b2_y1)
        ).clamp(0)
        w1, h1 = b1_x2 - b1_x1, b1_y2 - b1_y1 + self.eps
        w2, h2 = b2_x2 - b2_x1, b2_y2 - b2_y1 + self.eps
        union = w1 * h1 + w2 * h2 - inter + self.eps
        iou = inter / union
        cw = torch.max(b1_x2, b2_x2) - torch.min(b1_x1, b2_x1)
        ch = torch.max(b1_y2, b2_y2) - torch.min(b1_y1, b2_y1)
        s_cw = (b2_x1 + b2_x2 - b1_x1 - b1_x2) * 0.5 + self.eps
        s_ch = (b2_y1 + b2_y2 - b1_y1 - b1_y2) * 0.5 + self.eps
        sigma = torch.pow(s_cw ** 2 + s_ch ** 2, 0.5)
        sin_alpha_1 = torch.abs(s_cw) / sigma
        sin_alpha_2 = torch.abs(s_ch) / sigma
        threshold = pow(2, 0.5) / 2
        sin_alpha = torch.where(sin_alpha_1 > threshold, sin_alpha_2, sin_alpha_1)
        angle_cost = torch.cos(torch.arcsin(sin_alpha) * 2 - math.pi / 2)
        rho_x, rho_y = (s_cw / cw) ** 2, (s_ch / ch) ** 2
        gamma = angle_cost - 2
        distance_cost = 2 - torch.exp(gamma * rho_x) - torch.exp(gamma * rho_y)
        omiga_w = torch.abs(w1 - w2) / torch.max(w1, w2)
        omiga_h = torch.abs(h1 - h2) / torch.max(h1, h2)
        shape_cost = torch.pow(1 - torch.exp(-1 * omiga_w), 4) + torch.pow(1 - torch.exp(-1 * omiga_h), 4)
        iou = iou - 0.5 * (distance_cost + shape_cost)
        return (1.0 - iou).mean()


head = nn.Linear(8, 4)
feats = torch.randn(5, 8)
anchors = torch.tensor([[10.0, 10.0, 30.0, 30.0]]).repeat(5, 1)
pred = anchors + head(feats) * 4.0
target = anchors + torch.randn(5, 4) * 3.0
with torch.no_grad():  # box 0: same centre as its target, different size
    c = (pred[0, :2] + pred[0, 2:]) / 2
    target[0] = torch.cat([c - 7.0, c + 7.0])
loss = IOUloss()(pred, target)
loss.backward()
print("loss", round(loss.item(), 4))
print("head weight grad", round(head.weight.grad.norm().item(), 4))
print("head bias grad", round(head.bias.grad.norm().item(), 4))
