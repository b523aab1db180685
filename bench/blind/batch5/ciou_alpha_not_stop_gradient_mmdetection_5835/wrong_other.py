"""ciou_loss computes the trade-off weight alpha = v / (1 - IoU + v) inside the graph (as v**2 / (1 - ious + v)), so gradients flow through alpha into the IoU and aspect-ratio terms, unlike the official CIoU where alpha is a constant (and zero for IoU <= 0.5).

source: https://github.com/open-mmlab/mmdetection/pull/5835
symptom: silent
rule: ?
shape: detection box head (conv tower, delta regression, decoding) trained with a CIoU loss module, two SGD steps
wrong: other
why: detaches only the numerator of alpha; gradient still flows through ious and v in alpha's denominator and alpha is not zeroed for IoU <= 0.5, so the box gradients differ from the official CIoU
"""
import math
import torch
from torch import nn

torch.manual_seed(0)


def ciou_loss(pred, target, eps=1e-7):
    lt = torch.max(pred[:, :2], target[:, :2])
    rb = torch.min(pred[:, 2:], target[:, 2:])
    wh = (rb - lt).clamp(min=0)
    overlap = wh[:, 0] * wh[:, 1]
    ap = (pred[:, 2] - pred[:, 0]) * (pred[:, 3] - pred[:, 1])
    ag = (target[:, 2] - target[:, 0]) * (target[:, 3] - target[:, 1])
    union = ap + ag - overlap + eps
    ious = overlap / union
    enclose_x1y1 = torch.min(pred[:, :2], target[:, :2])
    enclose_x2y2 = torch.max(pred[:, 2:], target[:, 2:])
    enclose_wh = (enclose_x2y2 - enclose_x1y1).clamp(min=0)
    cw, ch = enclose_wh[:, 0], enclose_wh[:, 1]
    c2 = cw ** 2 + ch ** 2 + eps
    b1_x1, b1_y1, b1_x2, b1_y2 = pred.unbind(1)
    b2_x1, b2_y1, b2_x2, b2_y2 = target.unbind(1)
    w1, h1 = b1_x2 - b1_x1, b1_y2 - b1_y1 + eps
    w2, h2 = b2_x2 - b2_x1, b2_y2 - b2_y1 + eps
    left = ((b2_x1 + b2_x2) - (b1_x1 + b1_x2)) ** 2 / 4
    right = ((b2_y1 + b2_y2) - (b1_y1 + b1_y2)) ** 2 / 4
    rho2 = left + right
    factor = 4 / math.pi ** 2
    v = factor * torch.pow(torch.atan(w2 / h2) - torch.atan(w1 / h1), 2)
    alpha = v.detach() / (1 - ious + v)
    cious = ious - (rho2 / c2 + alpha * v)
    loss = 1 - cious.clamp(min=-1.0, max=1.0)
    return loss


class CIoULoss(nn.Module):
    def __init__(self, loss_weight=1.0):
        super().__init__()
        self.loss_weight = loss_weight

    def forward(self, pred, target):
        return self.loss_weight * ciou_loss(pred, target).mean()


class BoxHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.tower = nn.Sequential(nn.Linear(8, 16), nn.ReLU())
        self.reg = nn.Linear(16, 4)

    def forward(self, feats, anchors):
        d = self.reg(self.tower(feats))
        w = anchors[:, 2] - anchors[:, 0]
        h = anchors[:, 3] - anchors[:, 1]
        cx = (anchors[:, 0] + anchors[:, 2]) / 2 + d[:, 0] * w
        cy = (anchors[:, 1] + anchors[:, 3]) / 2 + d[:, 1] * h
        pw, ph = w * d[:, 2].exp(), h * d[:, 3].exp()
        return torch.stack([cx - pw / 2, cy - ph / 2, cx + pw / 2, cy + ph / 2], 1)


head = BoxHead()
criterion = CIoULoss()
opt = torch.optim.SGD(head.parameters(), lr=0.05)
anchors = torch.tensor([[0., 0., 10., 10.], [20., 20., 40., 30.], [5., 5., 15., 25.], [0., 0., 8., 4.]])
targets = torch.tensor([[1., 1., 11., 14.], [22., 18., 38., 39.], [4., 6., 14., 24.], [1., 0., 5., 9.]])
feats = torch.randn(4, 8)
for step in range(2):
    opt.zero_grad()
    loss = criterion(head(feats, anchors), targets)
    loss.backward()
    opt.step()
print("loss", round(loss.item(), 4))
print("grad reg", round(head.reg.weight.grad.norm().item(), 4))
print("grad tower", round(head.tower[0].weight.grad.norm().item(), 4))
