"""The backbone is "frozen" by running its forward under torch.no_grad(), but its parameters keep requires_grad=True, so the fastai-style OptimWrapper still applies its decoupled (true_wd) weight decay to them and the frozen weights drift every step.

source: https://github.com/open-mmlab/OpenPCDet/issues/845
symptom: silent
rule: ?
shape: detector-like nn.Module (backbone + head submodules), OptimWrapper around Adam with true weight decay applied in step() to every param with requires_grad, one-cycle style lr, several steps
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class Backbone(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU())

    def forward(self, x):
        with torch.no_grad():  # bench: bug
            return self.conv(x)  # bench: bug


class Detector(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone_3d = Backbone()
        self.dense_head = nn.Linear(16, 3)

    def forward(self, x):
        return self.dense_head(self.backbone_3d(x))


class OptimWrapper:
    """Adam wrapper that applies decoupled weight decay itself (true_wd), skipping params with requires_grad False."""

    def __init__(self, model, lr, wd):
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.opt = torch.optim.Adam(self.params, lr=lr, weight_decay=0.0)
        self.wd = wd

    def step(self):
        lr = self.opt.param_groups[0]['lr']
        for p in self.params:
            if p.requires_grad is False:
                continue
            p.data.mul_(1 - self.wd * lr)
        self.opt.step()

    def zero_grad(self):
        self.opt.zero_grad()


model = Detector()
init_backbone = [p.detach().clone() for p in model.backbone_3d.parameters()]
optimizer = OptimWrapper(model, lr=0.01, wd=0.5)
x = torch.randn(32, 8)
y = torch.randint(0, 3, (32,))

for step in range(10):
    optimizer.opt.param_groups[0]['lr'] = 0.01 * (1 + step) / 10  # warm-up part of the one-cycle schedule
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()

drift = sum((p.detach() - p0).abs().sum() for p, p0 in zip(model.backbone_3d.parameters(), init_backbone))
print("loss", round(loss.item(), 4))
print("backbone drift", round(drift.item(), 4))
print("head weight norm", round(model.dense_head.weight.norm().item(), 4))
