"""The asymmetric multi-label loss takes log of the sigmoid probabilities without a lower bound, so a saturated logit gives log(0) = -inf and nan gradients.

source: https://github.com/Alibaba-MIIL/ASL/pull/6
symptom: nan-grad
rule: ?
shape: loss nn.Module (AsymmetricLoss: sigmoid, probability clipping, log, asymmetric focusing) on a linear multi-label head
"""
import torch
import torch.nn as nn

torch.manual_seed(0)


class AsymmetricLoss(nn.Module):
    def __init__(self, gamma_neg=4, gamma_pos=1, clip=0.05, eps=1e-8):
        super().__init__()
        self.gamma_neg, self.gamma_pos, self.clip, self.eps = gamma_neg, gamma_pos, clip, eps

    def forward(self, x, y):
        x_sigmoid = torch.sigmoid(x)
        xs_pos = x_sigmoid
        xs_neg = 1 - x_sigmoid
        if self.clip is not None and self.clip > 0:
            xs_neg = (xs_neg + self.clip).clamp(max=1)
        los_pos = y * torch.log(xs_pos.clamp(min=self.eps))
        los_neg = (1 - y) * torch.log(xs_neg.clamp(min=self.eps))
        loss = los_pos + los_neg
        if self.gamma_neg > 0 or self.gamma_pos > 0:
            pt = xs_pos * y + xs_neg * (1 - y)
            one_sided_gamma = self.gamma_pos * y + self.gamma_neg * (1 - y)
            loss = loss * torch.pow(1 - pt, one_sided_gamma)
        return -loss.sum()


head = nn.Linear(6, 5)
feats = torch.randn(4, 6)
with torch.no_grad():
    head.bias.copy_(torch.tensor([-120.0, 12.0, 0.0, -3.0, 2.0]))
y = torch.tensor([[1.0, 1, 0, 0, 1], [0, 1, 1, 0, 0], [1, 0, 0, 1, 0], [0, 0, 1, 1, 1]])
loss = AsymmetricLoss()(head(feats), y)
loss.backward()
print("loss", round(loss.item(), 4))
print("head weight grad", round(head.weight.grad.norm().item(), 4))
print("head bias grad", [round(v, 4) for v in head.bias.grad.tolist()])
