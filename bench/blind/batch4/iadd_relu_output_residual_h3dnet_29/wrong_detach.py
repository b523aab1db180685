"""The refinement head adds the residual feature in place (net += original_feature) to the output of F.relu, which ReLU's backward needs, so backward fails.

source: https://github.com/zaiweizhang/H3DNet/issues/29
symptom: error
rule: ?
shape: 3D detection proposal module: Conv1d/BatchNorm1d submodules for surface and line features, max-pooled and concatenated, refine conv + in-place residual add of an earlier proposal feature, more convs, regression loss
wrong: detach
why: adding through .data hides the change from autograd: the residual branch gets no gradient (conv_proposal stops learning from this loss) and ReLU's backward reads the overwritten output, so its mask is wrong.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class ProposalModuleRefine(nn.Module):
    def __init__(self, c=16, out=10):
        super().__init__()
        self.conv_proposal = nn.Conv1d(c, c, 1)
        self.conv_surface1, self.bn_surface1 = nn.Conv1d(c, c, 1), nn.BatchNorm1d(c)
        self.conv_line1, self.bn_line1 = nn.Conv1d(c, c, 1), nn.BatchNorm1d(c)
        self.conv_refine1, self.bn_refine1 = nn.Conv1d(2 * c, c, 1), nn.BatchNorm1d(c)
        self.conv_refine2, self.bn_refine2 = nn.Conv1d(c, c, 1), nn.BatchNorm1d(c)
        self.conv_refine4 = nn.Conv1d(c, out, 1)

    def forward(self, seed_features, surface_features, line_features):
        b, c, p = seed_features.shape
        original_feature = F.relu(self.conv_proposal(seed_features))
        surface_features = F.relu(self.bn_surface1(self.conv_surface1(surface_features))).view(b, c, 6, p)
        line_features = F.relu(self.bn_line1(self.conv_line1(line_features))).view(b, c, 12, p)
        surface_pool_feature = F.max_pool2d(surface_features, (6, 1), stride=1).squeeze(2)
        line_pool_feature = F.max_pool2d(line_features, (12, 1), stride=1).squeeze(2)
        combine_feature = torch.cat((surface_pool_feature, line_pool_feature), dim=1)
        net = F.relu(self.bn_refine1(self.conv_refine1(combine_feature)))
        net.data += original_feature.data
        net = F.relu(self.bn_refine2(self.conv_refine2(net)))
        return self.conv_refine4(net)


model = ProposalModuleRefine()
seeds = torch.randn(2, 16, 8)
surf = torch.randn(2, 16, 6 * 8)
line = torch.randn(2, 16, 12 * 8)
target = torch.randn(2, 10, 8)
loss = F.smooth_l1_loss(model(seeds, surf, line), target)
loss.backward()
print("loss", round(loss.item(), 4))
g = model.conv_proposal.weight.grad
print("proposal grad", None if g is None else round(g.norm().item(), 4))
print("refine1 grad", round(model.conv_refine1.weight.grad.norm().item(), 4))
