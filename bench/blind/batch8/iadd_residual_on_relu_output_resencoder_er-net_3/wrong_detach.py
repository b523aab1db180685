"""The residual encoder block adds the shortcut with `out += residual` in place on the output of a ReLU, which ReLU's backward saved.

source: https://github.com/iMED-Lab/ER-Net/pull/3
symptom: error
rule: ?
shape: 3D segmentation net (nn.Module with ResEncoder submodules: conv-bn-relu x2 plus 1x1 shortcut), BCE loss, Adam training loop, several steps
wrong: detach
why: adding a detached shortcut removes the in-place error but cuts the 1x1 shortcut branch from the graph, so conv1x1 never gets a gradient and the input-side layers get only the main-branch part of theirs.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class ResEncoder(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv1 = nn.Conv3d(in_channels, out_channels, kernel_size=3, padding=1)
        self.bn1 = nn.BatchNorm3d(out_channels)
        self.conv2 = nn.Conv3d(out_channels, out_channels, kernel_size=3, padding=1)
        self.bn2 = nn.BatchNorm3d(out_channels)
        self.relu = nn.ReLU(inplace=False)
        self.conv1x1 = nn.Conv3d(in_channels, out_channels, kernel_size=1)

    def forward(self, x):
        residual = self.conv1x1(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = out + residual.detach()
        out = self.relu(out)
        return out


class TinyERNet(nn.Module):
    def __init__(self, channels=1, classes=1):
        super().__init__()
        self.encoder1 = ResEncoder(channels, 4)
        self.encoder2 = ResEncoder(4, 8)
        self.down = nn.MaxPool3d(kernel_size=2, stride=2)
        self.up = nn.ConvTranspose3d(8, 4, kernel_size=2, stride=2)
        self.final = nn.Conv3d(4, classes, kernel_size=1)

    def forward(self, x):
        enc1 = self.encoder1(x)
        enc2 = self.encoder2(self.down(enc1))
        dec = self.up(enc2) + enc1
        return torch.sigmoid(self.final(dec))


model = TinyERNet()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
x = torch.randn(2, 1, 4, 8, 8)
y = (torch.rand(2, 1, 4, 8, 8) > 0.7).float()

for step in range(3):
    optimizer.zero_grad()
    pred = model(x)
    loss = F.binary_cross_entropy(pred, y)
    loss.backward()
    optimizer.step()

print("loss", round(loss.item(), 4))
g = model.encoder1.conv1x1.weight.grad
print("enc1 shortcut grad norm", None if g is None else round(g.norm().item(), 4))
print("enc1 conv1 grad norm", round(model.encoder1.conv1.weight.grad.norm().item(), 4))
