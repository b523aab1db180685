"""The densification strategy reads the gradient of the projected 2D means, but means2d is an intermediate tensor of the rasterizer, so its .grad stays None after loss.backward().

source: https://github.com/nerfstudio-project/gsplat/issues/390
symptom: none-grad
rule: ?
shape: Gaussian-splatting library: rasterization() projects 3D means to 2D and splats them, returns info with means2d; a densification strategy accumulates |d loss / d means2d| after backward
"""
import torch
import torch.nn as nn

torch.manual_seed(0)


def rasterization(means, colors, viewmat, K, width=8, height=8, sigma=1.0):
    cam = (viewmat[:3, :3] @ means.t() + viewmat[:3, 3:]).t()
    uv = (K @ cam.t()).t()
    means2d = uv[:, :2] / uv[:, 2:3]
    ys, xs = torch.meshgrid(torch.arange(height, dtype=means.dtype), torch.arange(width, dtype=means.dtype), indexing="ij")
    pix = torch.stack([xs, ys], -1).view(-1, 1, 2)
    w = torch.exp(-((pix - means2d[None]) ** 2).sum(-1) / (2 * sigma ** 2))
    img = (w @ colors).view(height, width, -1)
    return img, {"means2d": means2d}


class DefaultStrategy:
    def __init__(self, n):
        self.grad2d = torch.zeros(n)
        self.count = 0

    def step_post_backward(self, info):
        g = info["means2d"].grad
        if g is None:
            return None
        self.grad2d += g.norm(dim=-1)
        self.count += 1
        return self.grad2d / self.count


means = nn.Parameter(torch.randn(6, 3) * 0.5 + torch.tensor([0.0, 0.0, 4.0]))
colors = nn.Parameter(torch.rand(6, 3))
viewmat = torch.eye(4)
K = torch.tensor([[8.0, 0.0, 4.0], [0.0, 8.0, 4.0], [0.0, 0.0, 1.0]])
target = torch.rand(8, 8, 3)
strategy = DefaultStrategy(6)
img, info = rasterization(means, colors, viewmat, K)  # bench: bug
loss = (img - target).abs().mean()
loss.backward()
avg = strategy.step_post_backward(info)
print("loss", round(loss.item(), 4))
print("means2d grad avg", None if avg is None else [round(v, 4) for v in avg.tolist()])
print("means grad", None if means.grad is None else round(means.grad.norm().item(), 4))
