"""The encoder's frozen option sets module.requires_grad = False, a plain attribute on the nn.Module that autograd ignores, so the "frozen" pretrained encoder keeps receiving gradients and is updated by the optimizer.

source: https://github.com/catalyst-team/catalyst/pull/81
symptom: silent
rule: ?
shape: library encoder wrapper (ResnetEncoder-style nn.Module with a frozen flag) plus a classification head, SGD training loop over model.parameters()
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class Encoder(nn.Module):
    def __init__(self, frozen=True):
        super().__init__()
        self.encoder = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())
        if frozen:
            for module in self.encoder:
                module.requires_grad = False  # bench: bug

    def forward(self, x):
        return self.encoder(x)


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = Encoder(frozen=True)
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        return self.head(self.encoder(x))


model = Classifier()
w0 = model.encoder.encoder[0].weight.detach().clone()
opt = torch.optim.SGD(filter(lambda p: p.requires_grad, model.parameters()), lr=0.5)
x, y = torch.randn(8, 3, 6, 6), torch.randint(0, 3, (8,))
for step in range(5):
    opt.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
print("loss", round(loss.item(), 4))
print("encoder weight change", round((model.encoder.encoder[0].weight.detach() - w0).norm().item(), 4))
print("head grad", round(model.head.weight.grad.norm().item(), 4))
