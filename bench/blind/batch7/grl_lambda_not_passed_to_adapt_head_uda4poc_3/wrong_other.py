"""The segmentation model computes a scheduled gradient-reversal lambda and takes it as forward(x, grl_lambda), but calls self.adapt(x11) without it, so the reversal always uses the default lambda = 1 from the first step on.

source: https://github.com/p2irc/UDA4POC/issues/3
symptom: silent
rule: ?
shape: domain-adaptation model (nn.Module with encoder/decoder/adapt head) using a gradient-reversal autograd.Function, Adam training loop with a lambda schedule
wrong: other
why: multiplies the domain loss by grl_lambda instead of passing it to the reversal layer, which also scales the domain head's own gradient, so the discriminator learns slowly early on
"""
import math
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class GradientReversal(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, lambd):
        ctx.lambd = lambd
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad_output):
        return -ctx.lambd * grad_output, None


class AdaptHead(nn.Module):
    def __init__(self, ch):
        super().__init__()
        self.fc = nn.Sequential(nn.Linear(ch, 16), nn.ReLU(), nn.Linear(16, 1))

    def forward(self, x, grl_lambda=1.0):
        x = GradientReversal.apply(x, grl_lambda)
        return self.fc(x.mean((2, 3)))


class SegNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.down = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), nn.ReLU(), nn.Conv2d(8, 16, 3, 2, 1), nn.ReLU())
        self.up = nn.Sequential(nn.Upsample(scale_factor=4), nn.Conv2d(16, 1, 3, 1, 1))
        self.adapt = AdaptHead(16)

    def forward(self, x, grl_lambda=1):
        x11 = self.down(x)
        seg = self.up(x11)
        dom = self.adapt(x11)
        return seg, dom


model = SegNet()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
src, src_mask = torch.randn(4, 3, 16, 16), (torch.rand(4, 1, 16, 16) > 0.5).float()
tgt = torch.randn(4, 3, 16, 16) + 0.5
steps = 6
for step in range(steps):
    p = step / steps
    grl_lambda = 2.0 / (1.0 + math.exp(-10 * p)) - 1
    opt.zero_grad()
    seg, dom_s = model(src, grl_lambda)
    _, dom_t = model(tgt, grl_lambda)
    seg_loss = F.binary_cross_entropy_with_logits(seg, src_mask)
    dom_loss = F.binary_cross_entropy_with_logits(dom_s, torch.zeros_like(dom_s)) + F.binary_cross_entropy_with_logits(dom_t, torch.ones_like(dom_t))
    loss = seg_loss + grl_lambda * dom_loss
    loss.backward()
    if step == 0:
        first_grad = model.down[0].weight.grad.norm().item()
    opt.step()
print("seg loss", round(seg_loss.item(), 4))
print("dom loss", round(dom_loss.item(), 4))
print("encoder grad at step 0", round(first_grad, 4))
print("adapt grad", round(model.adapt.fc[0].weight.grad.norm().item(), 4))
