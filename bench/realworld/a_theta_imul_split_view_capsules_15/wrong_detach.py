"""Scales in place one of the outputs of torch.split (`theta *= 2. * math.pi`) inside a pose transform

source: https://github.com/phanideepgampa/stacked-capsule-networks/issues/15
symptom: error
rule: none
shape: helper function called from a model: `torch.split(pose_tensor, 1, -1)` then `theta *= ...` under `if nonlinear:`
wrong: detach
why: scales theta through `.data`, so the forward uses 2*pi*theta but the gradient misses the 2*pi factor
"""
import math

import torch
import torch.nn as nn


def geometric_transform(pose_tensor, similarity=False, nonlinear=True):
    scale_x, scale_y, theta, shear, trans_x, trans_y = torch.split(pose_tensor, 1, -1)

    if nonlinear:
        scale_x, scale_y = torch.sigmoid(scale_x) + 1e-2, torch.sigmoid(scale_y) + 1e-2
        trans_x, trans_y, shear = torch.tanh(trans_x * 5.),  torch.tanh(trans_y * 5.), torch.tanh(shear * 5.)
        theta.data *= 2. * math.pi
    else:
        scale_x, scale_y = (abs(i) + 1e-2 for i in (scale_x, scale_y))

    c, s = torch.cos(theta), torch.sin(theta)

    if similarity:
        scale = scale_x
        pose = [scale * c, -scale * s, trans_x, scale * s, scale * c, trans_y]

    else:
        pose = [
            scale_x * c + shear * scale_y * s, -scale_x * s + shear * scale_y * c,
            trans_x, scale_y * s, scale_y * c, trans_y
        ]

    pose = torch.cat(pose, -1)

    # convert to a matrix
    shape = list(pose.shape[:-1])
    shape += [2, 3]
    pose = torch.reshape(pose, shape)
    return pose


class PoseHead(nn.Module):
    def __init__(self, n_in, n_caps):
        super().__init__()
        self.n_caps = n_caps
        self.fc = nn.Linear(n_in, n_caps * 6)

    def forward(self, h):
        pose = self.fc(h).view(h.size(0), self.n_caps, 6)
        return geometric_transform(pose)


torch.manual_seed(0)
head = PoseHead(10, 4)
h = torch.randn(3, 10)
poses = head(h)
loss = poses.pow(2).mean()
loss.backward()
print(round(loss.item(), 4), round(head.fc.weight.grad.norm().item(), 4))
