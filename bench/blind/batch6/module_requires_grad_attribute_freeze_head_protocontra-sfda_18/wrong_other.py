"""Source-free adaptation means to freeze the segmentation head, but sets requires_grad = False on the nn.Module object, which only adds an attribute; the head's parameters still require grad and the optimizer built from model.parameters() keeps training them.

source: https://github.com/CSCYQJ/MICCAI23-ProtoContra-SFDA/issues/18
symptom: silent
rule: ?
shape: segmentation adaptation trainer: UNet-like encoder + 1x1 output conv, entropy loss on target images, head meant to stay frozen
wrong: other
why: puts the head in eval mode, which only changes dropout/batch-norm behaviour; its parameters still require grad and the optimizer still updates them
"""
import torch
import torch.nn as nn

torch.manual_seed(0)


class UNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1), nn.ReLU())
        self.outc = nn.Conv2d(8, 3, 1)

    def forward(self, x):
        return self.outc(self.enc(x))


class Adapter:
    def __init__(self, model):
        self.model = model
        self.model.outc.eval()
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.5)

    def step(self, img):
        p = self.model(img).softmax(1)
        loss = -(p * p.clamp_min(1e-8).log()).sum(1).mean()
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return loss


model = UNet()
head0 = model.outc.weight.detach().clone()
adapter = Adapter(model)
for step in range(5):
    loss = adapter.step(torch.randn(2, 1, 8, 8))
print("loss", round(loss.item(), 4))
print("head change", round((model.outc.weight - head0).norm().item(), 4))
print("encoder weight", round(model.enc[0].weight.norm().item(), 4))
