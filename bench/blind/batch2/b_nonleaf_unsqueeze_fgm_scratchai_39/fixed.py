"""The fast gradient method marks the image as requiring grad and only then unsqueezes it into a batch, so the tensor used in the loss is a non-leaf and `x.grad` stays None after backward.

source: https://github.com/iArunava/scratchai/pull/39 (commit 69d4b83)
symptom: none-grad
rule: ?
shape: adversarial-attack function (FGM with optimize_linear helper) wrapped in an attack class, applied to a frozen CNN classifier on a single 3-D image
"""

import numpy as np
import torch
import torch.nn as nn

torch.manual_seed(0)


def optimize_linear(grads, eps, ordr):
    red_ind = list(range(1, len(grads.size())))
    azdiv = torch.tensor(1e-12, dtype=grads.dtype, device=grads.device)
    if ordr == np.inf:
        opt_pert = torch.sign(grads)
    elif ordr == 2:
        square = torch.max(azdiv, torch.sum(grads**2, red_ind, keepdim=True))
        opt_pert = grads / torch.sqrt(square)
    else:
        raise NotImplementedError("Only L-inf and L2 norms are currently implemented.")
    return eps * opt_pert


def fgm(x, net, eps=0.3, ordr=np.inf, y=None, clip_min=None, clip_max=None, targeted=False):
    # Inplace operations not working for some bug #15070
    # TODO Update when fixed
    if len(x.shape) == 3:
        x = x.unsqueeze(0)

    # x needs to have requires_grad set to True
    # for its grad to be computed and stored properly in a backward call
    x = x.detach().clone()
    x.requires_grad_(True)

    if y is None:
        _, y = torch.max(net(x), dim=1)

    crit = nn.CrossEntropyLoss()
    loss = crit(net(x), y)
    if targeted:
        loss = -loss
    loss.backward()
    opt_pert = optimize_linear(x.grad, eps, ordr)
    adv_x = x + opt_pert
    if (clip_min is not None) or (clip_max is not None):
        adv_x = torch.clamp(adv_x, clip_min, clip_max)
    return adv_x


class FGM:
    def __init__(self, net, **kwargs):
        self.net = net
        self.kwargs = kwargs

    def __call__(self, x):
        return fgm(x, self.net, **self.kwargs)


net = nn.Sequential(
    nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4), nn.Flatten(), nn.Linear(8 * 16, 10)
).eval()
for p in net.parameters():
    p.requires_grad_(False)

img = torch.rand(3, 16, 16)
attack = FGM(net, eps=0.1, ordr=np.inf, clip_min=0.0, clip_max=1.0)
adv = attack(img)

with torch.no_grad():
    clean_logits = net(img.unsqueeze(0))
    adv_logits = net(adv)
print("perturbation abs mean", round((adv - img).abs().mean().item(), 4))
print("clean true-class logit", round(clean_logits.max().item(), 4))
print("adv logit of that class", round(adv_logits[0, clean_logits.argmax()].item(), 4))
