"""Binary focal loss raises (1 - p) and p to a power gamma < 1 without eps, so a saturated sigmoid (p exactly 0 or 1) gives pow's infinite derivative at 0 and nan gradients.

source: https://github.com/kornia/kornia/issues/918
symptom: nan-grad
rule: ?
shape: loss module (BinaryFocalLossWithLogits) on a small nn.Module classifier head, one backward
"""
import torch
import torch.nn as nn

torch.manual_seed(0)


def binary_focal_loss_with_logits(input, target, alpha=0.25, gamma=0.5, eps=1e-8):
    probs = torch.sigmoid(input)
    loss_tmp = (
        -alpha * torch.pow(1.0 - probs + eps, gamma) * target * torch.log(probs + eps)
        - (1 - alpha) * torch.pow(probs + eps, gamma) * (1.0 - target) * torch.log(1.0 - probs + eps)
    )
    return loss_tmp.mean()


class BinaryFocalLossWithLogits(nn.Module):
    def __init__(self, alpha=0.25, gamma=0.5):
        super().__init__()
        self.alpha, self.gamma = alpha, gamma

    def forward(self, input, target):
        return binary_focal_loss_with_logits(input, target, self.alpha, self.gamma)


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 8), nn.ReLU())
        self.cls = nn.Linear(8, 1)

    def forward(self, x):
        return self.cls(self.body(x)).squeeze(-1)


model = Head()
with torch.no_grad():
    model.cls.weight.mul_(60.0)  # a confident head: some logits saturate the sigmoid
x = torch.randn(16, 4)
target = (torch.rand(16) > 0.5).float()
crit = BinaryFocalLossWithLogits()
loss = crit(model(x), target)
loss.backward()
print("loss", round(loss.item(), 4))
print("cls grad", round(model.cls.weight.grad.norm().item(), 4))
print("body grad", round(model.body[0].weight.grad.norm().item(), 4))
