"""The adaptive GCN builds its label adjacency from the learned projections W_theta and W_phi and then detaches it, so no gradient reaches W_theta/W_phi and their .grad stays None.

source: https://github.com/queenie88/A-GCN/issues/4
symptom: none-grad
rule: ?
shape: multi-label classifier module: image feature extractor + GCN head (two GraphConvolution submodules) over label embeddings with an adjacency computed from W_theta/W_phi linear layers; multilabel soft-margin loss
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class GraphConvolution(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(cin, cout) * 0.1)

    def forward(self, x, adj):
        return adj @ (x @ self.weight)


class AGCN(nn.Module):
    def __init__(self, num_classes=5, emb=12, feat=16):
        super().__init__()
        self.features = nn.Sequential(nn.Linear(20, feat), nn.ReLU())
        self.W_theta = nn.Linear(emb, emb)
        self.W_phi = nn.Linear(emb, emb)
        self.gc1 = GraphConvolution(emb, 24)
        self.gc2 = GraphConvolution(24, feat)

    def forward(self, img, inp):
        feature = self.features(img)
        theta, phi = self.W_theta(inp), self.W_phi(inp)
        adj = torch.softmax(theta @ phi.t(), dim=-1)
        adj = adj.detach()  # bench: bug
        x = F.leaky_relu(self.gc1(inp, adj), 0.2)
        x = self.gc2(x, adj)
        return feature @ x.t()


model = AGCN()
img, word_emb = torch.randn(6, 20), torch.randn(5, 12)
target = (torch.rand(6, 5) > 0.5).float()
loss = F.multilabel_soft_margin_loss(model(img, word_emb), target)
loss.backward()
g = model.W_theta.weight.grad
print("loss", round(loss.item(), 4))
print("W_theta grad", None if g is None else round(g.norm().item(), 4))
print("gc1 grad", round(model.gc1.weight.grad.norm().item(), 4))
