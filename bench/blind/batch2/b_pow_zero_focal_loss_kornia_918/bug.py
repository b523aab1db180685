"""The binary focal loss takes `torch.pow(1 - probs, gamma)` with gamma < 1; where a confident logit saturates the sigmoid to exactly 1 the power's derivative is infinite and the backward turns into NaN.

source: https://github.com/kornia/kornia/issues/918 (fix PR #924, commit 36131d7)
symptom: nan-grad
rule: ?
shape: loss function (binary focal loss with logits) wrapped in an nn.Module criterion, small conv segmentation net with a confident head, Adam training loop
"""

import torch
import torch.nn as nn

torch.manual_seed(0)


def binary_focal_loss_with_logits(input, target, alpha=0.25, gamma=2.0, reduction="none", eps=1e-8):
    if not len(input.shape) >= 2:
        raise ValueError("Invalid input shape, we expect BxCx*. Got: {}".format(input.shape))
    probs = torch.sigmoid(input)
    target = target.unsqueeze(dim=1)
    loss_tmp = -alpha * torch.pow((1.0 - probs), gamma) * target * torch.log(probs + eps) - (  # bench: bug
        1 - alpha
    ) * torch.pow(probs, gamma) * (1.0 - target) * torch.log(1.0 - probs + eps)  # bench: bug
    loss_tmp = loss_tmp.squeeze(dim=1)
    if reduction == "none":
        return loss_tmp
    if reduction == "mean":
        return torch.mean(loss_tmp)
    if reduction == "sum":
        return torch.sum(loss_tmp)
    raise NotImplementedError("Invalid reduction mode: {}".format(reduction))


class BinaryFocalLossWithLogits(nn.Module):
    def __init__(self, alpha, gamma=2.0, reduction="none"):
        super().__init__()
        self.alpha = alpha
        self.gamma = gamma
        self.reduction = reduction
        self.eps = 1e-8

    def forward(self, input, target):
        return binary_focal_loss_with_logits(input, target, self.alpha, self.gamma, self.reduction, self.eps)


net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 1, 1))
with torch.no_grad():  # a confident, already trained head
    net[2].weight.mul_(60.0)
criterion = BinaryFocalLossWithLogits(alpha=0.25, gamma=0.5, reduction="mean")
opt = torch.optim.Adam(net.parameters(), lr=1e-3)
images = torch.randn(4, 3, 8, 8)
masks = (torch.rand(4, 8, 8) > 0.5).float()

for step in range(3):
    opt.zero_grad()
    loss = criterion(net(images), masks)
    loss.backward()
    opt.step()

print("loss", round(loss.item(), 4))
print("head grad norm", round(net[2].weight.grad.norm().item(), 4))
print("conv1 grad norm", round(net[0].weight.grad.norm().item(), 4))
