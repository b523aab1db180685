"""The freeze snippet sets `param.require_grad = False` (missing "s"), which just adds a new Python attribute; requires_grad stays True, so the "frozen" pretrained backbone keeps training with the new head.

source: https://github.com/SvenBecker/vscode-pytorch/issues/8
symptom: silent
rule: ?
shape: fine-tuning script: pretrained backbone nn.Module + new classifier head, freeze loop over backbone parameters, SGD with momentum over model.parameters(), several steps
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(12, 32), nn.ReLU(), nn.Linear(32, 16), nn.ReLU())
        self.fc = nn.Linear(16, 4)

    def forward(self, x):
        return self.fc(self.backbone(x))


model = Classifier()
# freeze the pretrained part, train only the new head
for param in model.backbone.parameters():
    param.requires_grad = False

optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
backbone_init = [p.detach().clone() for p in model.backbone.parameters()]
x = torch.randn(64, 12)
y = torch.randint(0, 4, (64,))

for step in range(8):
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()

drift = sum((p.detach() - p0).abs().sum() for p, p0 in zip(model.backbone.parameters(), backbone_init))
print("loss", round(loss.item(), 4))
print("backbone drift", round(drift.item(), 4))
print("head weight norm", round(model.fc.weight.norm().item(), 4))
