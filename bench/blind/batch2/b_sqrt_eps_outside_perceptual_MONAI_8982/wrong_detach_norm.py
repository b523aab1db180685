"""The perceptual loss normalises feature maps with `x / (sqrt(sum(x**2)) + eps)`; where a feature vector is all zero (masked background) the square root is taken at exactly 0, the eps only guards the forward division, and the backward returns NaN.

source: https://github.com/Project-MONAI/MONAI/pull/8982 (fixes MONAI issue #8412)
symptom: nan-grad
rule: ?
shape: loss nn.Module (perceptual loss over a frozen bias-free feature network with a channel-normalisation helper function) plus L1, masked autoencoder reconstruction trained with Adam
wrong: detach
why: detaching the norm removes the NaN but treats the normaliser as a constant, so the gradient no longer contains the term that keeps the features on the unit sphere.
"""

import torch
import torch.nn as nn

torch.manual_seed(0)


def normalize_tensor(x: torch.Tensor, eps: float = 1e-10) -> torch.Tensor:
    norm_factor = torch.sqrt(torch.sum(x**2, dim=1, keepdim=True)).detach()
    return x / (norm_factor + eps)


def spatial_average(x: torch.Tensor, keepdim: bool = True) -> torch.Tensor:
    return x.mean([2, 3], keepdim=keepdim)


class PerceptualSimilarity(nn.Module):
    def __init__(self):
        super().__init__()
        self.model = nn.Sequential(
            nn.Conv2d(1, 4, 3, padding=1, bias=False), nn.LeakyReLU(0.2), nn.Conv2d(4, 4, 3, padding=1, bias=False)
        ).eval()
        for param in self.model.parameters():
            param.requires_grad = False

    def forward(self, input, target):
        outs_input = self.model(input)
        outs_target = self.model(target)
        feats_input = normalize_tensor(outs_input)
        feats_target = normalize_tensor(outs_target)
        results = (feats_input - feats_target) ** 2
        return spatial_average(results.sum(dim=1, keepdim=True), keepdim=True).mean()


autoencoder = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 1, 3, padding=1))
perceptual = PerceptualSimilarity()
opt = torch.optim.Adam(autoencoder.parameters(), lr=1e-3)
images = torch.rand(4, 1, 12, 12)
brain_mask = torch.zeros(4, 1, 12, 12)
brain_mask[:, :, 3:9, 3:9] = 1.0  # zero background around the anatomy
images = images * brain_mask

for step in range(3):
    opt.zero_grad()
    recon = autoencoder(images) * brain_mask
    loss = (recon - images).abs().mean() + 0.5 * perceptual(recon, images)
    loss.backward()
    opt.step()

print("loss", round(loss.item(), 4))
print("encoder grad norm", round(autoencoder[0].weight.grad.norm().item(), 4))
print("decoder grad norm", round(autoencoder[2].weight.grad.norm().item(), 4))
