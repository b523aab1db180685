"""The per-level mask features are summed with `+=` into the first level's output, which is a ReLU output that ReLU's backward still needs.

source: https://github.com/easton-cau/SOTR/issues/19
symptom: error
rule: ?
shape: nn.Module forward across submodules (FPN mask branch: a ModuleList of conv towers, in-place accumulation, prediction conv), training steps with SGD
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


def conv_gn_relu(cin, cout):
    return [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.GroupNorm(4, cout), nn.ReLU(inplace=False)]


class MaskBranch(nn.Module):
    def __init__(self, in_channels=8, mask_channels=8, num_levels=4, num_masks=4):
        super().__init__()
        self.num_levels = num_levels
        self.convs_all_levels = nn.ModuleList()
        for i in range(num_levels):
            if i == 0:
                self.convs_all_levels.append(nn.Sequential(*conv_gn_relu(in_channels, mask_channels)))
                continue
            layers = []
            for j in range(i):
                cin = (in_channels + 2 if i == 3 else in_channels) if j == 0 else mask_channels
                layers += conv_gn_relu(cin, mask_channels)
                layers.append(nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False))
            self.convs_all_levels.append(nn.Sequential(*layers))
        self.conv_pred = nn.Sequential(nn.Conv2d(mask_channels, num_masks, 1))

    def forward(self, features):
        feature_add_all_level = self.convs_all_levels[0](features[0])
        for i in range(1, self.num_levels):
            mask_feat = features[i]
            if i == 3:  # add for coord.
                x_range = torch.linspace(-1, 1, mask_feat.shape[-1])
                y_range = torch.linspace(-1, 1, mask_feat.shape[-2])
                y, x = torch.meshgrid(y_range, x_range, indexing="ij")
                y = y.expand([mask_feat.shape[0], 1, -1, -1])
                x = x.expand([mask_feat.shape[0], 1, -1, -1])
                coord_feat = torch.cat([x, y], 1)
                mask_feat = torch.cat([mask_feat, coord_feat], 1)
            feature_add_all_level = feature_add_all_level + self.convs_all_levels[i](mask_feat)
        return self.conv_pred(feature_add_all_level)


model = MaskBranch()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
features = [torch.randn(2, 8, 16 // 2**i, 16 // 2**i) for i in range(4)]
target = (torch.rand(2, 4, 16, 16) > 0.5).float()

for step in range(3):
    optimizer.zero_grad()
    mask_pred = model(features)
    loss = F.binary_cross_entropy_with_logits(mask_pred, target)
    loss.backward()
    grad_norm = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]).norm()
    optimizer.step()

print("loss", round(loss.item(), 4))
print("grad norm", round(grad_norm.item(), 4))
g3 = model.convs_all_levels[3][0].weight.grad
print("level3 conv grad norm", None if g3 is None else round(g3.norm().item(), 4))
