"""DoubleGeodesicSE3 calls rotmat_geodesic_distance with its default clamping of 1.0, so a predicted rotation equal to the target gives acos(1), whose derivative is infinite, and the pose-regression gradients become nan.

source: https://github.com/eigenvivek/nanodrr/pull/31
symptom: nan-grad
rule: ?
shape: registration loss module (SE(3) double geodesic: rotation geodesic via acos of the relative-rotation trace, translation distance) on a pose head that outputs a 6D rotation and a translation, batch with an exact, a near and a far pose
"""
import math
import torch
from torch import nn
import torch.nn.functional as F

torch.manual_seed(0)


def rotmat_cosine_angle(R):
    return 0.5 * (R[..., 0, 0] + R[..., 1, 1] + R[..., 2, 2] - 1)


def rotmat_geodesic_distance(R1, R2, clamping=1.0):
    """As in roma: angle of the relative rotation R1^T R2."""
    return torch.acos(torch.clamp(rotmat_cosine_angle(R1.transpose(-2, -1) @ R2), -clamping, clamping))


class DoubleGeodesicSE3(nn.Module):
    def __init__(self, sdd, eps=1e-7):
        super().__init__()
        self.sdr = sdd / 2
        self.eps = eps

    def forward(self, pose_1, pose_2):
        r1, t1 = pose_1[:, :3, :3], pose_1[:, :3, 3]
        r2, t2 = pose_2[:, :3, :3], pose_2[:, :3, 3]
        t1 = torch.einsum("bij,bj->bi", r1.transpose(-1, -2), t1)
        t2 = torch.einsum("bij,bj->bi", r2.transpose(-1, -2), t2)
        rot = self._rot_geodesic(r1, r2)
        xyz = self._xyz_geodesic(t1, t2)
        dou = (rot.square() + xyz.square() + self.eps).sqrt()
        return rot, xyz, dou

    def _rot_geodesic(self, r1, r2):
        return self.sdr * rotmat_geodesic_distance(r1, r2, clamping=1.0 - self.eps)

    def _xyz_geodesic(self, t1, t2):
        return (t1 - t2).square().sum(dim=-1).clamp(min=self.eps).sqrt()


def rotation_6d_to_matrix(d6):
    a1, a2 = d6[..., :3], d6[..., 3:]
    b1 = F.normalize(a1, dim=-1)
    b2 = F.normalize(a2 - (b1 * a2).sum(-1, keepdim=True) * b1, dim=-1)
    b3 = torch.cross(b1, b2, dim=-1)
    return torch.stack((b1, b2, b3), dim=-1)


def rot_z(deg):
    a = math.radians(deg)
    return torch.tensor([[math.cos(a), -math.sin(a), 0.0], [math.sin(a), math.cos(a), 0.0], [0.0, 0.0, 1.0]])


class PoseHead(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.d6 = nn.Parameter(torch.tensor([[1.0, 0.0, 0.0, 0.0, 1.0, 0.0]]).repeat(n, 1))
        self.trans = nn.Parameter(torch.zeros(n, 3))

    def forward(self):
        pose = torch.eye(4).repeat(self.d6.shape[0], 1, 1)
        pose = torch.cat([torch.cat([rotation_6d_to_matrix(self.d6), self.trans[:, :, None]], 2), pose[:, 3:]], 1)
        return pose


targets = torch.eye(4).repeat(3, 1, 1)
targets[1, :3, :3] = rot_z(0.5)
targets[2, :3, :3] = rot_z(30.0)
targets[:, :3, 3] = torch.tensor([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 2.0, 0.0]])
head = PoseHead(3)
criterion = DoubleGeodesicSE3(sdd=1020.0)
rot, xyz, dou = criterion(head(), targets)
loss = dou.mean()
loss.backward()
print("loss", round(loss.item(), 4))
print("grad d6", [round(v, 4) for v in head.d6.grad.norm(dim=1).tolist()])
print("grad trans", round(head.trans.grad.norm().item(), 4))
