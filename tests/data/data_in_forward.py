import torch
from torch import nn


class Scale(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones(3))
        self.b = nn.Parameter(torch.zeros(3))

    def forward(self, x):
        return x * self.w.data + self.b


torch.manual_seed(0)
loss = (Scale()(torch.randn(3)) ** 2).sum()
loss.backward()
