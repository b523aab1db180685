"""rotation_matrix_to_quaternion evaluates all four branches and picks one with torch.where; the trace branch takes sqrt(trace + 1.0) without eps, so for a 180-degree rotation (trace = -1) the unused branch is sqrt(0), whose infinite derivative times the zero gradient from torch.where makes the gradients nan.

source: https://github.com/kornia/kornia/pull/1665
symptom: nan-grad
rule: ?
shape: geometry library conversion (rotation matrix to quaternion with four torch.where branches and safe division) inside a rotation-regression loss on a pose head that outputs a 6D rotation, one optimizer step
"""
import torch
from torch import nn
import torch.nn.functional as F

torch.manual_seed(0)


def rotation_matrix_to_quaternion(rotation_matrix, eps=1e-8):
    def safe_zero_division(numerator, denominator):
        eps = torch.finfo(numerator.dtype).tiny
        return numerator / torch.clamp(denominator, min=eps)

    rotation_matrix_vec = rotation_matrix.reshape(*rotation_matrix.shape[:-2], 9)
    m00, m01, m02, m10, m11, m12, m20, m21, m22 = torch.chunk(rotation_matrix_vec, chunks=9, dim=-1)
    trace = m00 + m11 + m22

    def trace_positive_cond():
        sq = torch.sqrt(trace + 1.0 + eps) * 2.0  # sq = 4 * qw.
        qw = 0.25 * sq
        qx = safe_zero_division(m21 - m12, sq)
        qy = safe_zero_division(m02 - m20, sq)
        qz = safe_zero_division(m10 - m01, sq)
        return torch.cat((qw, qx, qy, qz), dim=-1)

    def cond_1():
        sq = torch.sqrt(1.0 + m00 - m11 - m22 + eps) * 2.0
        qw = safe_zero_division(m21 - m12, sq)
        qx = 0.25 * sq
        qy = safe_zero_division(m01 + m10, sq)
        qz = safe_zero_division(m02 + m20, sq)
        return torch.cat((qw, qx, qy, qz), dim=-1)

    def cond_2():
        sq = torch.sqrt(1.0 + m11 - m00 - m22 + eps) * 2.0
        qw = safe_zero_division(m02 - m20, sq)
        qx = safe_zero_division(m01 + m10, sq)
        qy = 0.25 * sq
        qz = safe_zero_division(m12 + m21, sq)
        return torch.cat((qw, qx, qy, qz), dim=-1)

    def cond_3():
        sq = torch.sqrt(1.0 + m22 - m00 - m11 + eps) * 2.0
        qw = safe_zero_division(m10 - m01, sq)
        qx = safe_zero_division(m02 + m20, sq)
        qy = safe_zero_division(m12 + m21, sq)
        qz = 0.25 * sq
        return torch.cat((qw, qx, qy, qz), dim=-1)

    where_2 = torch.where(m11 > m22, cond_2(), cond_3())
    where_1 = torch.where((m00 > m11) & (m00 > m22), cond_1(), where_2)
    return torch.where(trace > 0.0, trace_positive_cond(), where_1)


def rotation_6d_to_matrix(d6):
    b1 = F.normalize(d6[..., :3], dim=-1)
    a2 = d6[..., 3:]
    b2 = F.normalize(a2 - (b1 * a2).sum(-1, keepdim=True) * b1, dim=-1)
    return torch.stack((b1, b2, torch.cross(b1, b2, dim=-1)), dim=-1)


class RotationHead(nn.Module):
    def __init__(self, feat=4):
        super().__init__()
        self.fc = nn.Linear(feat, 6)
        with torch.no_grad():
            self.fc.weight.mul_(0.01)
            self.fc.bias.zero_()

    def forward(self, feats, init_6d):
        return rotation_6d_to_matrix(init_6d + self.fc(feats))


class QuaternionLoss(nn.Module):
    def forward(self, pred_R, target_q):
        return (rotation_matrix_to_quaternion(pred_R) - target_q).pow(2).sum(-1).mean()


head = RotationHead()
criterion = QuaternionLoss()
opt = torch.optim.SGD(head.parameters(), lr=0.1)
feats = torch.zeros(2, 4)  # sample 0 starts at a 180-degree rotation about z, sample 1 near identity
init_6d = torch.tensor([[-1.0, 0.0, 0.0, 0.0, -1.0, 0.0], [1.0, 0.05, 0.0, -0.05, 1.0, 0.0]])
target_q = torch.tensor([[0.0, 0.0, 0.0, 1.0], [0.8, 0.3, 0.2, 0.4]])
opt.zero_grad()
loss = criterion(head(feats, init_6d), target_q)
loss.backward()
opt.step()
print("loss", round(loss.item(), 4))
print("grad fc bias", [round(v, 4) for v in head.fc.bias.grad.tolist()])
