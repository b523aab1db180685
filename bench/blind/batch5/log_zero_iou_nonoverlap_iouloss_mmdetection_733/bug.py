"""IoULoss takes -log(IoU) directly, so a predicted box that does not overlap its target (IoU = 0) gives log(0) and the whole gradient becomes nan.

source: https://github.com/open-mmlab/mmdetection/pull/733
symptom: nan-grad
rule: ?
shape: detection head (shared conv tower, box-delta branch, delta decoding) trained with an IoU loss module, one step
"""
import torch
from torch import nn

torch.manual_seed(0)


def bbox_overlaps_aligned(b1, b2):
    lt = torch.max(b1[:, :2], b2[:, :2])
    rb = torch.min(b1[:, 2:], b2[:, 2:])
    wh = (rb - lt + 1).clamp(min=0)
    overlap = wh[:, 0] * wh[:, 1]
    area1 = (b1[:, 2] - b1[:, 0] + 1) * (b1[:, 3] - b1[:, 1] + 1)
    area2 = (b2[:, 2] - b2[:, 0] + 1) * (b2[:, 3] - b2[:, 1] + 1)
    return overlap / (area1 + area2 - overlap)


def iou_loss(pred_bboxes, target_bboxes):
    ious = bbox_overlaps_aligned(pred_bboxes, target_bboxes)  # bench: bug
    loss = -ious.log()
    return loss.mean()


class IoULoss(nn.Module):
    def __init__(self, loss_weight=1.0):
        super().__init__()
        self.loss_weight = loss_weight

    def forward(self, pred, target):
        return self.loss_weight * iou_loss(pred, target)


class BoxHead(nn.Module):
    def __init__(self, feat=16):
        super().__init__()
        self.tower = nn.Sequential(nn.Linear(8, feat), nn.ReLU(), nn.Linear(feat, feat), nn.ReLU())
        self.reg = nn.Linear(feat, 4)

    def decode(self, anchors, deltas):
        w = anchors[:, 2] - anchors[:, 0] + 1
        h = anchors[:, 3] - anchors[:, 1] + 1
        cx = anchors[:, 0] + 0.5 * w + deltas[:, 0] * w
        cy = anchors[:, 1] + 0.5 * h + deltas[:, 1] * h
        pw = w * deltas[:, 2].exp()
        ph = h * deltas[:, 3].exp()
        return torch.stack([cx - 0.5 * pw, cy - 0.5 * ph, cx + 0.5 * pw, cy + 0.5 * ph], 1)

    def forward(self, feats, anchors):
        return self.decode(anchors, self.reg(self.tower(feats)))


head = BoxHead()
criterion = IoULoss()
anchors = torch.tensor([[0., 0., 10., 10.], [20., 20., 40., 40.], [5., 5., 15., 25.], [50., 50., 60., 60.]])
targets = torch.tensor([[2., 1., 12., 11.], [22., 18., 41., 39.], [6., 4., 14., 26.], [80., 80., 90., 90.]])
feats = torch.randn(4, 8)
loss = criterion(head(feats, anchors), targets)
loss.backward()
print("loss", round(loss.item(), 4))
print("grad reg", round(head.reg.weight.grad.norm().item(), 4))
print("grad tower", round(head.tower[0].weight.grad.norm().item(), 4))
