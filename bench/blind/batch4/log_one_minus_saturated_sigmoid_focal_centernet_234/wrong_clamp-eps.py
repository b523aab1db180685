"""The heatmap focal loss takes log(1 - pred) of a plain sigmoid, so a confidently detected centre (sigmoid saturated to 1.0 in float32) gives -inf times a zero mask, and the loss and the head's gradients become nan.

source: https://github.com/xingyizhou/CenterNet/issues/234
symptom: nan-grad
rule: ?
shape: CenterNet-style detector: conv backbone + heatmap head; CtdetLoss module applies the sigmoid to the head output and calls FocalLoss (_neg_loss with log(pred) and log(1 - pred) masked by pos/neg indicators)
wrong: clamp-eps
why: clamping the log at -100 (as BCELoss does internally) makes the loss finite, but log's backward still divides by 1 - pred = 0 at the saturated centre, so the head's gradients stay nan.
"""
import torch
import torch.nn as nn

torch.manual_seed(0)


def _sigmoid(x):
    y = x.sigmoid()
    return y


def _neg_loss(pred, gt):
    pos_inds = gt.eq(1).float()
    neg_inds = gt.lt(1).float()
    neg_weights = torch.pow(1 - gt, 4)
    pos_loss = torch.log(pred) * torch.pow(1 - pred, 2) * pos_inds
    neg_loss = torch.log(1 - pred).clamp(min=-100) * torch.pow(pred, 2) * neg_weights * neg_inds
    num_pos = pos_inds.float().sum()
    pos_loss, neg_loss = pos_loss.sum(), neg_loss.sum()
    if num_pos == 0:
        return -neg_loss
    return -(pos_loss + neg_loss) / num_pos


class FocalLoss(nn.Module):
    def forward(self, out, target):
        return _neg_loss(out, target)


class CtdetLoss(nn.Module):
    def __init__(self):
        super().__init__()
        self.crit = FocalLoss()

    def forward(self, output, batch):
        return self.crit(_sigmoid(output["hm"]), batch["hm"])


class CenterHead(nn.Module):
    def __init__(self, num_classes=2):
        super().__init__()
        self.backbone = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU())
        self.hm = nn.Conv2d(8, num_classes, 1)
        self.hm.bias.data.fill_(-2.19)

    def forward(self, x):
        return {"hm": self.hm(self.backbone(x))}


model = CenterHead()
x = torch.randn(1, 3, 8, 8) * 60.0  # high-contrast image: some centre logits saturate the sigmoid
with torch.no_grad():
    cy, cx = divmod(model(x)["hm"][0, 0].argmax().item(), 8)
gt = torch.zeros(1, 2, 8, 8)
gt[0, 0, max(cy - 1, 0) : cy + 2, max(cx - 1, 0) : cx + 2] = 0.6
gt[0, 0, cy, cx] = 1.0  # the object centre sits where the head is most confident
out = model(x)
with torch.no_grad():
    print("max logit", round(out["hm"].max().item(), 2))
loss = CtdetLoss()(out, {"hm": gt})
loss.backward()
print("loss", round(loss.item(), 4))
print("hm grad", round(model.hm.weight.grad.norm().item(), 4))
print("backbone grad", round(model.backbone[0].weight.grad.norm().item(), 4))
