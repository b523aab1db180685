"""RESMLPS keeps its sub-MLPs in a plain Python list, so their weights are not registered, model.parameters() leaves them out, and the optimizer never updates them.

source: https://github.com/LianpoWang/SLIIF/issues/13
symptom: no-training
rule: ?
shape: implicit-function decoder module RESMLPS holding a list of RES_MLP submodules, a coordinate MLP and an expansion net that mixes the sub-MLP outputs; Adam over model.parameters(); three steps
wrong: other
why: re-wrapping the list as nn.ModuleList at the first forward registers the sub-MLPs only after the optimizer was built from model.parameters(), so they get gradients that are never applied.
"""
import torch
import torch.nn as nn

torch.manual_seed(0)


class RES_MLP(nn.Module):
    def __init__(self, in_dim, out_dim, hidden):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(in_dim, hidden), nn.Linear(hidden, out_dim)
        self.skip = nn.Linear(in_dim, out_dim)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x))) + self.skip(x)


class RESMLPS(nn.Module):
    def __init__(self, in_dim=6, out_dim=3, hidden=16, n=4):
        super().__init__()
        self.mlps = [RES_MLP(in_dim, out_dim, hidden) for _ in range(n)]
        self.cood_mlp = nn.Sequential(nn.Linear(2, hidden), nn.ReLU(), nn.Linear(hidden, in_dim))
        self.expansionNet = nn.Linear(in_dim, n)

    def forward(self, feat, coord):
        if not isinstance(self.mlps, nn.ModuleList):
            self.mlps = nn.ModuleList(self.mlps)
        h = feat + self.cood_mlp(coord)
        w = torch.softmax(self.expansionNet(h), dim=-1)
        outs = torch.stack([m(h) for m in self.mlps], dim=-1)
        return (outs * w.unsqueeze(1)).sum(-1)


model = RESMLPS()
opt = torch.optim.Adam(model.parameters(), lr=0.01)
feat, coord, rgb = torch.randn(32, 6), torch.rand(32, 2), torch.rand(32, 3)
w0 = model.mlps[0].fc1.weight.detach().clone()
for _ in range(3):
    opt.zero_grad()
    loss = nn.functional.l1_loss(model(feat, coord), rgb)
    loss.backward()
    opt.step()
print("loss", round(nn.functional.l1_loss(model(feat, coord), rgb).item(), 4))
print("n params", sum(p.numel() for p in model.parameters()))
print("mlp0 weight change", round((model.mlps[0].fc1.weight - w0).norm().item(), 4))
