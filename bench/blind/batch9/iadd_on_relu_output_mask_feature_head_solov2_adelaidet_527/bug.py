"""SOLOv2's mask feature head sums the per-level branches with `+=` into the first branch's output, which ReLU's backward saved, so backward fails with an in-place modification error.

source: https://github.com/aim-uofa/AdelaiDet/issues/527
symptom: error
rule: ?
shape: nn.Module mask-feature head (per-level conv+GN+ReLU branches with upsampling, summed, then a 1x1 predictor), SGD training loop over several steps
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


def conv_gn_relu(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.GroupNorm(4, cout), nn.ReLU(inplace=False))


class MaskFeatHead(nn.Module):
    def __init__(self, in_ch=8, mid_ch=8, out_ch=4, num_levels=3):
        super().__init__()
        self.convs_all_levels = nn.ModuleList()
        for i in range(num_levels):
            if i == 0:
                self.convs_all_levels.append(conv_gn_relu(in_ch, mid_ch))
                continue
            layers = []
            for j in range(i):
                layers.append(conv_gn_relu(in_ch if j == 0 else mid_ch, mid_ch))
                layers.append(nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False))
            self.convs_all_levels.append(nn.Sequential(*layers))
        self.conv_pred = nn.Conv2d(mid_ch, out_ch, 1)

    def forward(self, features):
        feature_add_all_level = self.convs_all_levels[0](features[0])
        for i in range(1, len(features)):
            mask_feat = features[i]
            feature_add_all_level += self.convs_all_levels[i](mask_feat)  # bench: bug
        return self.conv_pred(feature_add_all_level)


head = MaskFeatHead()
feats = [torch.randn(2, 8, 16, 16), torch.randn(2, 8, 8, 8), torch.randn(2, 8, 4, 4)]
target = torch.randn(2, 4, 16, 16)
opt = torch.optim.SGD(head.parameters(), lr=0.05)
for step in range(5):
    opt.zero_grad()
    loss = F.mse_loss(head(feats), target)
    loss.backward()
    opt.step()
print("loss", round(loss.item(), 4))
print("level0_grad", round(head.convs_all_levels[0][0].weight.grad.norm().item(), 4))
g2 = head.convs_all_levels[2][0][0].weight.grad
print("level2_grad", None if g2 is None else round(g2.norm().item(), 4))
