"""The gradient-accumulation check is `if batches_done % opt.gradient_accumulations:`, which is true on every batch except the multiples, so the optimizer steps (and zeroes the gradients) almost every batch instead of once per accumulation window.

source: https://github.com/eriklindernoren/PyTorch-YOLOv3/pull/313
symptom: silent
rule: ?
shape: detector training loop (small conv nn.Module with a regression head standing in for Darknet + YOLO loss), Adam, gradient accumulation over several batches, two epochs
"""
import argparse

import torch
import torch.nn as nn

torch.manual_seed(0)

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--gradient_accumulations", type=int, default=4)
opt = parser.parse_args([])


class TinyDarknet(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.LeakyReLU(0.1), nn.MaxPool2d(2),
                                      nn.Conv2d(8, 8, 3, padding=1), nn.LeakyReLU(0.1), nn.AdaptiveAvgPool2d(1))
        self.head = nn.Linear(8, 5)

    def forward(self, imgs, targets):
        outputs = self.head(self.features(imgs).flatten(1))
        loss = ((outputs - targets) ** 2).mean()
        return loss, outputs


model = TinyDarknet()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
dataloader = [(torch.randn(2, 3, 16, 16), torch.randn(2, 5)) for _ in range(8)]

for epoch in range(opt.epochs):
    model.train()
    for batch_i, (imgs, targets) in enumerate(dataloader):
        batches_done = len(dataloader) * epoch + batch_i

        loss, outputs = model(imgs, targets)
        loss.backward()

        if batches_done % opt.gradient_accumulations == 0:
            # Accumulates gradient before each step
            optimizer.step()
            optimizer.zero_grad()

with torch.no_grad():
    total = sum(model(i, t)[0] for i, t in dataloader) / len(dataloader)
print("last loss", round(loss.item(), 4))
print("mean loss", round(total.item(), 4))
print("head weight norm", round(model.head.weight.norm().item(), 4))
