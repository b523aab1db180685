"""The pose fine-tuning step rounds the predicted flow with .int(), sends it through numpy and rebuilds the 2D points with torch.tensor, so the PnP pose loss is cut from the flow network; setting requires_grad=True on the projected points only makes them new leaves, and the network's .grad stays None.

source: https://github.com/EasonChen99/I2D-Loc/issues/8
symptom: none-grad
rule: ?
shape: flow-network training script: RAFT-like flow module predicts per-pixel flow, sampled pixels + flow give 2D points, a differentiable least-squares pose layer (stand-in for BPnP) solves the pose from 2D-3D pairs, reprojection loss against the ground-truth pose
"""
import torch
import torch.nn as nn

torch.manual_seed(0)


class FlowNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(4, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 2, 3, padding=1))

    def forward(self, depth_img, rgb_img):
        return [self.net(torch.cat([depth_img, rgb_img], dim=1)) * 4.0]


def bpnp(pts2d, pts3d, K):
    """least-squares affine camera from 2D-3D pairs (differentiable in pts2d)."""
    X = torch.cat([pts3d, torch.ones(pts3d.shape[0], 1)], dim=1)
    return torch.linalg.lstsq(X, pts2d @ torch.linalg.inv(K[:2, :2]).T).solution  # [4, 2]


def project(P, pts3d, K):
    X = torch.cat([pts3d, torch.ones(pts3d.shape[0], 1)], dim=1)
    return (X @ P) @ K[:2, :2].T


model = FlowNet()
K = torch.tensor([[2.0, 0.0, 0.0], [0.0, 2.0, 0.0], [0.0, 0.0, 1.0]])
depth_img, rgb_img = torch.randn(1, 1, 8, 8), torch.randn(1, 3, 8, 8)
idx = torch.randperm(64)[:12]
uv = torch.stack([idx % 8, idx // 8], dim=1).float()
pts3d = torch.randn(12, 3)
P_gt = torch.randn(4, 2)

flow_up = model(depth_img, rgb_img)[-1]
output = flow_up.permute(0, 2, 3, 1)[0].reshape(-1, 2)
pts2d = uv + output[idx]
P_out = bpnp(pts2d, pts3d, K)
pts2d_pro = project(P_out, pts3d, K)
pts2d_gt = project(P_gt, pts3d, K)
loss = nn.functional.mse_loss(pts2d_pro, pts2d_gt)
loss.backward()
g = model.net[0].weight.grad
print("loss", round(loss.item(), 4))
print("flow net grad", None if g is None else round(g.norm().item(), 4))
