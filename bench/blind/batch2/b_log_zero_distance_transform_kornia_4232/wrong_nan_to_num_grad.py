"""The distance transform takes `log` of a convolution that is exactly zero far from any foreground and repairs only the forward value with `nan_to_num`, so the backward through `log(0)` fills the gradient with NaN.

source: https://github.com/kornia/kornia/pull/4232
symptom: nan-grad
rule: ?
shape: function (cascaded-convolution distance transform) inside a boundary loss on a padded sigmoid mask from a small conv net, Adam training loop
wrong: other
why: replacing the NaN gradients by zero after backward wipes out the whole gradient of every parameter touched by the NaN, so the net stops learning.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


def filter2d_replicate(x, kernel):
    k = kernel.shape[-1] // 2
    x = F.pad(x, (k, k, k, k), mode="replicate")
    return F.conv2d(x, kernel[None])


def distance_transform(image, kernel_size=3, h=0.35):
    k_half = kernel_size // 2
    n_iters = math.ceil(max(image.shape[2], image.shape[3]) / k_half)
    ys, xs = torch.meshgrid(torch.arange(kernel_size), torch.arange(kernel_size), indexing="ij")
    dist = torch.hypot((xs - k_half).float(), (ys - k_half).float())
    kernel = torch.exp(-dist / h).unsqueeze(0)
    out = torch.zeros_like(image)
    boundary = image.clone()
    signal_ones = torch.ones_like(boundary)
    for i in range(n_iters):
        cdt = filter2d_replicate(boundary, kernel)
        cdt = -h * torch.log(cdt)
        cdt = torch.nan_to_num(cdt, nan=0.0, posinf=0.0, neginf=0.0)
        mask = cdt > 0
        offset = i * k_half
        out = out + (offset + cdt) * mask.to(dtype=out.dtype)
        boundary = torch.where(mask, signal_ones, boundary)
    return out


net = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 1, 3, padding=1))
opt = torch.optim.Adam(net.parameters(), lr=1e-2)
images = torch.randn(2, 1, 12, 12)
valid = torch.zeros(2, 1, 12, 12)  # images padded to a common 12x12 size
valid[:, :, :8, :8] = 1.0
target = torch.zeros(2, 1, 12, 12)
target[:, :, 2:4, 2:4] = 1.0
target_dt = distance_transform(target)

for step in range(2):
    opt.zero_grad()
    heat = torch.sigmoid(net(images)) * valid
    loss = F.mse_loss(distance_transform(heat), target_dt) + F.mse_loss(heat, target)
    loss.backward()
    for p in net.parameters():
        p.grad = torch.nan_to_num(p.grad)
    opt.step()


def grad_norm(p):
    return None if p.grad is None else round(p.grad.norm().item(), 4)


print("loss", round(loss.item(), 4))
print("conv1 grad norm", grad_norm(net[0].weight))
print("conv2 grad norm", grad_norm(net[2].weight))
