"""convert_points_from_homogeneous guards 1/z with torch.where, but the unselected 1/z branch at z == 0 still sends 0 * inf = nan into the backward pass.

source: https://github.com/kornia/kornia/issues/367
symptom: nan-grad
rule: ?
shape: function (library geometry helper) inside a keypoint/homography regression training loop; some predicted homogeneous points have w == 0 (padding)
"""
import torch
import torch.nn as nn

torch.manual_seed(0)


def convert_points_from_homogeneous(points, eps=1e-8):
    if len(points.shape) < 2:
        raise ValueError("Input must be at least a 2D tensor. Got {}".format(points.shape))

    # we check for points at infinity
    z_vec: torch.Tensor = points[..., -1:]

    # set the results of division by zeror/near-zero to 1.0
    # follow the convention of opencv:
    # https://github.com/opencv/opencv/pull/14411/files
    scale: torch.Tensor = torch.where(  # bench: bug
        torch.abs(z_vec) > eps, torch.tensor(1.0) / z_vec, torch.ones_like(z_vec)  # bench: bug
    )  # bench: bug

    return scale * points[..., :-1]


class KeypointHead(nn.Module):
    def __init__(self, n_points=6):
        super().__init__()
        self.n_points = n_points
        self.net = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, n_points * 3))

    def forward(self, feats, valid):
        points_h = self.net(feats).view(-1, self.n_points, 3)
        w = points_h[..., 2:] * valid.unsqueeze(-1)  # padded points have w == 0
        points_h = torch.cat([points_h[..., :2], w], dim=-1)
        return convert_points_from_homogeneous(points_h)


model = KeypointHead()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
feats = torch.randn(4, 8)
valid = torch.ones(4, 6)
valid[:, 4:] = 0.0
target = torch.randn(4, 6, 2)

for step in range(3):
    optimizer.zero_grad()
    pts = model(feats, valid)
    loss = (((pts - target) ** 2).sum(-1) * valid).sum() / valid.sum()
    loss.backward()
    grad_norm = torch.cat([p.grad.flatten() for p in model.parameters()]).norm()
    optimizer.step()

print("loss", round(loss.item(), 4))
print("grad norm", round(grad_norm.item(), 4))
print("last layer grad norm", round(model.net[2].weight.grad.norm().item(), 4))
