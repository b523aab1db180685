import torch
from torch import nn

model = nn.Sequential(nn.Linear(4, 4), nn.Sigmoid(), nn.Dropout(0.5))
for m in model.modules():
    if isinstance(m, nn.Dropout):
        m.inplace = True  # after construction: dropout now overwrites the sigmoid's output
torch.manual_seed(0)
model(torch.randn(2, 4)).sum().backward()
