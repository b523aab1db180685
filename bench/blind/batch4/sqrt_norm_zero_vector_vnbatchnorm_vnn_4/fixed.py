"""VNBatchNorm takes the vector norm as sqrt((x*x).sum(2)) and divides by it, so a zero feature vector (a point at the origin) gives 0/0 and an infinite sqrt derivative, and the whole network's gradients become nan.

source: https://github.com/FlyingGiraffe/vnn/pull/4
symptom: nan-grad
rule: ?
shape: vector-neuron point-cloud classifier: VNLinear -> VNBatchNorm -> VNLinear -> VNBatchNorm submodules, invariant norm pooling and a linear head; one cross-entropy step
"""
import torch
import torch.nn as nn

torch.manual_seed(0)
EPS = 1e-6


class VNLinear(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.map_to_feat = nn.Linear(cin, cout, bias=False)

    def forward(self, x):  # x: [B, C, 3, N]
        return self.map_to_feat(x.transpose(1, -1)).transpose(1, -1)


class VNBatchNorm(nn.Module):
    def __init__(self, num_features):
        super().__init__()
        self.bn = nn.BatchNorm1d(num_features)

    def forward(self, x):
        norm = torch.norm(x, dim=2) + EPS
        norm_bn = self.bn(norm)
        norm = norm.unsqueeze(2)
        norm_bn = norm_bn.unsqueeze(2)
        return x / norm * norm_bn


class VNClassifier(nn.Module):
    def __init__(self, num_classes=4):
        super().__init__()
        self.l1, self.bn1 = VNLinear(1, 8), VNBatchNorm(8)
        self.l2, self.bn2 = VNLinear(8, 8), VNBatchNorm(8)
        self.head = nn.Linear(8, num_classes)

    def forward(self, pts):
        x = pts.transpose(1, 2).unsqueeze(1)  # [B, 1, 3, N]
        x = self.bn1(self.l1(x))
        x = self.bn2(self.l2(x))
        inv = x.mean(-1).norm(dim=2)  # rotation-invariant [B, C]
        return self.head(inv)


model = VNClassifier()
pts = torch.randn(4, 16, 3)
pts[:, 0] = 0.0  # every cloud is centred on one of its points
labels = torch.tensor([0, 1, 2, 3])
loss = nn.functional.cross_entropy(model(pts), labels)
loss.backward()
print("loss", round(loss.item(), 4))
print("bn2 grad", round(model.bn2.bn.weight.grad.norm().item(), 4))
print("l2 grad", round(model.l2.map_to_feat.weight.grad.norm().item(), 4))
