"""A small regression model whose forward assembles its two heads with torch.tensor."""
import torch
from torch import nn


class Regressor(nn.Module):
    def __init__(self, features=3):
        super().__init__()
        self.body = nn.Linear(features, 4)
        self.scale = nn.Parameter(torch.ones(2))

    def forward(self, x):
        h = torch.tanh(self.body(x))
        mean = h[:, 0].mean() * self.scale[0]
        spread = h[:, 1].std() * self.scale[1]
        return torch.tensor([mean, spread])
