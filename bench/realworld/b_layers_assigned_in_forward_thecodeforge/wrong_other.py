"""Layers assigned to self inside forward(): every batch gets a fresh, untrained layer, so the optimizer updates weights that are already gone

source: https://thecodeforge.io/ml-ai/pytorch-neural-network/
symptom: no-training
rule: none
shape: nn.Module classifier whose output layer is (re)created in forward; Adam built once before the loop
wrong: other
why: moves the head to __init__ but stores it in a plain Python list, so it is not registered and the optimizer never updates it
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Classifier(nn.Module):
    def __init__(self, in_features, num_classes):
        super().__init__()
        self.hidden = nn.Linear(in_features, 16)
        self.num_classes = num_classes
        self.layers = [nn.Linear(16, self.num_classes)]

    def forward(self, x):
        x = F.relu(self.hidden(x))
        return self.layers[0](x)


torch.manual_seed(0)
model = Classifier(8, 3)
model(torch.zeros(1, 8))  # build once so the optimizer has every parameter
optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
x = torch.randn(64, 8)
y = (x[:, 0] > 0).long() + (x[:, 1] > 0).long()
for epoch in range(30):
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
with torch.no_grad():
    acc = (model(x).argmax(1) == y).float().mean().item()
print("train accuracy:", round(acc, 4))
