"""The training loop clips the gradient norm right after `grad_scaler.scale(loss).backward()`, i.e. on the still-scaled gradients, so the clip threshold is compared with gradients 65536x too large and every step is shrunk to almost nothing.

source: https://github.com/milesial/Pytorch-UNet/pull/470
symptom: silent
rule: ?
shape: segmentation training loop (small conv net nn.Module), GradScaler loss scaling, clip_grad_norm_, RMSprop optimizer, ReduceLROnPlateau scheduler, several steps
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class TinyUNet(nn.Module):
    def __init__(self, n_channels=3, n_classes=2):
        super().__init__()
        self.inc = nn.Sequential(nn.Conv2d(n_channels, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
        self.down = nn.Sequential(nn.MaxPool2d(2), nn.Conv2d(8, 16, 3, padding=1), nn.ReLU())
        self.up = nn.ConvTranspose2d(16, 8, 2, stride=2)
        self.outc = nn.Conv2d(16, n_classes, 1)

    def forward(self, x):
        x1 = self.inc(x)
        x2 = self.down(x1)
        return self.outc(torch.cat([self.up(x2), x1], dim=1))


model = TinyUNet()
optimizer = torch.optim.RMSprop(model.parameters(), lr=1e-3, weight_decay=1e-8, momentum=0.999, foreach=True)
scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, 'max', patience=5)
grad_scaler = torch.amp.GradScaler('cpu', enabled=True)
criterion = nn.CrossEntropyLoss()
gradient_clipping = 1.0

images = torch.randn(4, 3, 16, 16) * 3
true_masks = (images[:, 0] > 0).long()

for step in range(6):
    masks_pred = model(images)
    loss = criterion(masks_pred, true_masks)
    loss = loss + (1 - F.softmax(masks_pred, dim=1)[:, 1][true_masks == 1].mean())

    optimizer.zero_grad(set_to_none=True)
    grad_scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), gradient_clipping)  # bench: bug
    grad_scaler.step(optimizer)
    grad_scaler.update()
scheduler.step(-loss.item())

with torch.no_grad():
    final = criterion(model(images), true_masks)
print("loss", round(loss.item(), 4))
print("final loss", round(final.item(), 4))
print("outc weight norm", round(model.outc.weight.norm().item(), 4))
