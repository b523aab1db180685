"""The Gaussian Wasserstein distance loss takes sqrt of the squared distance without clamping, so a predicted box that already matches its target (distance 0) gives sqrt's infinite derivative and nan gradients for the whole head.

source: https://github.com/open-mmlab/mmrotate/issues/205
symptom: nan-grad
rule: ?
shape: rotated-box regression head (nn.Linear) + GDLoss module (xy_wh_r -> Gaussian conversion, gwd_loss with sqrt, log1p post-processing); one step where one prediction equals its target
wrong: other
why: guards the sqrt with torch.where(d > 0, d.sqrt(), 0): the forward is finite but the unselected branch still has an infinite derivative at d == 0, and 0 * inf keeps the head's gradients nan.
"""
import torch
import torch.nn as nn

torch.manual_seed(0)


def xy_wh_r_2_xy_sigma(xywhr):
    xy = xywhr[..., :2]
    wh = xywhr[..., 2:4].clamp(min=1e-7, max=1e7)
    r = xywhr[..., 4]
    cos_r, sin_r = torch.cos(r), torch.sin(r)
    R = torch.stack((cos_r, -sin_r, sin_r, cos_r), dim=-1).reshape(-1, 2, 2)
    S = 0.5 * torch.diag_embed(wh)
    sigma = R.bmm(S.square()).bmm(R.permute(0, 2, 1))
    return xy, sigma


def gwd_loss(pred, target, tau=1.0, alpha=1.0):
    xy_p, Sigma_p = pred
    xy_t, Sigma_t = target
    xy_distance = (xy_p - xy_t).square().sum(dim=-1)
    whr_distance = Sigma_p.diagonal(dim1=-2, dim2=-1).sum(dim=-1)
    whr_distance = whr_distance + Sigma_t.diagonal(dim1=-2, dim2=-1).sum(dim=-1)
    _t_tr = (Sigma_p.bmm(Sigma_t)).diagonal(dim1=-2, dim2=-1).sum(dim=-1)
    _t_det_sqrt = (Sigma_p.det() * Sigma_t.det()).clamp(1e-7).sqrt()
    whr_distance = whr_distance + (-2) * ((_t_tr + 2 * _t_det_sqrt).clamp(1e-7).sqrt())
    d = xy_distance + alpha * alpha * whr_distance
    distance = torch.where(d > 0, d.sqrt(), torch.zeros_like(d))
    return 1 - 1 / (tau + torch.log1p(distance))


class GDLoss(nn.Module):
    def forward(self, pred, target):
        return gwd_loss(xy_wh_r_2_xy_sigma(pred), xy_wh_r_2_xy_sigma(target)).mean()


head = nn.Linear(8, 5)
feats = torch.randn(6, 8)
pred = head(feats)
pred = torch.cat([pred[:, :2], pred[:, 2:4].exp(), pred[:, 4:]], dim=1)
target = pred.detach() + torch.randn(6, 5) * 0.3
target[0] = pred[0].detach()  # this box is already regressed exactly
loss = GDLoss()(pred, target)
loss.backward()
print("loss", round(loss.item(), 4))
print("head weight grad", round(head.weight.grad.norm().item(), 4))
print("head bias grad", round(head.bias.grad.norm().item(), 4))
