"""The layer is frozen mid-training by setting requires_grad=False only; its .grad keeps a (zeroed) tensor, so Adam still steps it from its momentum state and the "frozen" weights keep changing.

source: https://discuss.pytorch.org/t/why-there-is-still-a-small-change-in-frozen-layer-parameters/153740
symptom: silent
rule: ?
shape: flat training script: two-layer nn.Module, a set_freeze_by_layer_names helper, Adam, a warm-up phase training everything then a phase with fc1 frozen, several steps each
"""
from collections.abc import Iterable

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Sequential(nn.Linear(10, 16), nn.ReLU())
        self.fc2 = nn.Linear(16, 3)

    def forward(self, x):
        return self.fc2(self.fc1(x))


def set_freeze_by_layer_names(model, layer_names, freeze=True):
    if not isinstance(layer_names, Iterable) or isinstance(layer_names, str):
        layer_names = [layer_names]
    for name, child in model.named_children():
        if name not in layer_names:
            continue
        for param in child.parameters():
            param.requires_grad = not freeze  # bench: bug


def training(model, optimizer, x, y, steps):
    for _ in range(steps):
        # stand-in for the older default of zero_grad(), which zeroed .grad instead of setting it to None
        optimizer.zero_grad(set_to_none=False)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
    return loss


model = Net()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
x = torch.randn(32, 10)
y = torch.randint(0, 3, (32,))

training(model, optimizer, x, y, 5)
set_freeze_by_layer_names(model, 'fc1', freeze=True)
before = model.fc1[0].weight.detach().clone()
loss = training(model, optimizer, x, y, 5)
after = model.fc1[0].weight.detach().clone()
set_freeze_by_layer_names(model, 'fc1', freeze=False)

print("loss", round(loss.item(), 4))
print("frozen fc1 drift", round((after - before).abs().sum().item(), 4))
print("fc2 weight norm", round(model.fc2.weight.norm().item(), 4))
