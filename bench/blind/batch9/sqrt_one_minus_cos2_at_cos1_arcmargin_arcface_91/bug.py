"""ArcMarginProduct computes sine as sqrt((1 - cos^2).clamp(0, 1)), whose gradient is infinite when a feature lies exactly on its class centre (cos = 1), so the backward pass turns every weight gradient into nan.

source: https://github.com/ronghuaiyang/arcface-pytorch/issues/91
symptom: nan-grad
rule: ?
shape: face-recognition training: MLP backbone + ArcMarginProduct nn.Module (class weights imprinted from embeddings), cross-entropy, SGD loop over several steps
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn import Parameter

torch.manual_seed(0)


class ArcMarginProduct(nn.Module):
    def __init__(self, in_features, out_features, s=30.0, m=0.50, easy_margin=False):
        super(ArcMarginProduct, self).__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.s = s
        self.m = m
        self.weight = Parameter(torch.FloatTensor(out_features, in_features))
        nn.init.xavier_uniform_(self.weight)

        self.easy_margin = easy_margin
        self.cos_m = math.cos(m)
        self.sin_m = math.sin(m)
        self.th = math.cos(math.pi - m)
        self.mm = math.sin(math.pi - m) * m

    def forward(self, input, label):
        cosine = F.linear(F.normalize(input), F.normalize(self.weight))
        sine = torch.sqrt((1.0 - torch.pow(cosine, 2)).clamp(0, 1))  # bench: bug
        phi = cosine * self.cos_m - sine * self.sin_m
        if self.easy_margin:
            phi = torch.where(cosine > 0, phi, cosine)
        else:
            phi = torch.where(cosine > self.th, phi, cosine - self.mm)
        one_hot = torch.zeros(cosine.size())
        one_hot.scatter_(1, label.view(-1, 1).long(), 1)
        output = (one_hot * phi) + ((1.0 - one_hot) * cosine)
        output *= self.s
        return output


backbone = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 16))
metric_fc = ArcMarginProduct(16, 4, s=30.0, m=0.5)
x = torch.randn(32, 10)
label = torch.arange(32) % 4
# imprint the class weights from the embedding of the first sample of each class
with torch.no_grad():
    feats = backbone(x)
    for c in range(4):
        metric_fc.weight[c] = feats[c]

opt = torch.optim.SGD(list(backbone.parameters()) + list(metric_fc.parameters()), lr=0.01, momentum=0.9)
criterion = nn.CrossEntropyLoss()
for step in range(5):
    opt.zero_grad()
    output = metric_fc(backbone(x), label)
    loss = criterion(output, label)
    loss.backward()
    if step == 0:
        g0 = backbone[0].weight.grad.norm().item()
    opt.step()
print("loss", round(loss.item(), 4))
print("backbone_grad_step0", round(g0, 4))
print("metric_w_norm", round(metric_fc.weight.norm().item(), 4))
