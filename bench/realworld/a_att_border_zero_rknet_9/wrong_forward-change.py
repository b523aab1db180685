"""Attention map from a ReLU gets its borders zeroed in place before it weights the features

source: https://github.com/AggMan96/RK-Net/issues/9
symptom: error
rule: GF204
shape: nn.Module forward, index assignments `att[:, :, :, 0] = 0` under `if self.polish:`
wrong: forward-change
why: drops the border zeroing (polish) to silence the in-place error, so the attention map and the gradients change
"""
import torch
import torch.nn as nn


class Attention(nn.Module):
    def __init__(self, channels, polish=False):
        super(Attention, self).__init__()
        self.polish = polish
        self.conv = nn.Conv2d(channels, 1, kernel_size=3, padding=1)
        self.relu = nn.ReLU()

    def forward(self, x):
        att = self.relu(self.conv(x))
        if self.polish:
            att[:, :, :, 0] = 0
            att[:, :, :, -1] = 0
            att[:, :, 0, :] = 0
            att[:, :, -1, :] = 0
        return x * att


torch.manual_seed(0)
model = Attention(4)
x = torch.randn(8, 4, 6, 6)
loss = model(x).pow(2).mean()
loss.backward()
print(round(loss.item(), 4), round(model.conv.weight.grad.norm().item(), 4))
