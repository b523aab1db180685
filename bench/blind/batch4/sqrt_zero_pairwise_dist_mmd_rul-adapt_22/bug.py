"""The MMD loss builds its pairwise distances as sqrt((x - y)**2) over all feature pairs, including each sample with itself, so sqrt is differentiated at 0 and the feature extractor's gradients become nan.

source: https://github.com/tilman151/rul-adapt/pull/22
symptom: nan-grad
rule: ?
shape: domain-adaptation approach: feature extractor + regressor modules, MaximumMeanDiscrepancyLoss module calling a pairwise-distance helper; loss = source MSE + MMD(source feats, target feats)
"""
import torch
import torch.nn as nn

torch.manual_seed(0)


def _euclidean(x, y):
    return torch.sqrt((x - y) ** 2).sum(-1)  # bench: bug


def calc_pairwise_euclidean(x, y):
    return _euclidean(x[:, None], y[None, :])


class MaximumMeanDiscrepancyLoss(nn.Module):
    def __init__(self, num_kernels=3):
        super().__init__()
        self.num_kernels = num_kernels

    def forward(self, source_features, target_features):
        feats = torch.cat([source_features, target_features], dim=0)
        distances = calc_pairwise_euclidean(feats, feats)
        bandwidth = distances.detach().mean()
        gammas = [bandwidth * 2.0 ** (i - self.num_kernels // 2) for i in range(self.num_kernels)]
        kernel = sum(torch.exp(-distances / g) for g in gammas)
        n = source_features.shape[0]
        s2s, t2t, s2t = kernel[:n, :n], kernel[n:, n:], kernel[:n, n:]
        return s2s.mean() + t2t.mean() - 2 * s2t.mean()


feature_extractor = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 4))
regressor = nn.Linear(4, 1)
mmd = MaximumMeanDiscrepancyLoss()
source, target = torch.randn(8, 6), torch.randn(8, 6) + 0.5
rul = torch.rand(8, 1)

src_feats = feature_extractor(source)
tgt_feats = feature_extractor(target)
loss = nn.functional.mse_loss(regressor(src_feats), rul) + mmd(src_feats, tgt_feats)
loss.backward()
print("loss", round(loss.item(), 4))
print("extractor grad", round(feature_extractor[0].weight.grad.norm().item(), 4))
print("regressor grad", round(regressor.weight.grad.norm().item(), 4))
