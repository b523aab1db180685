"""Sets `.requires_grad = True` on the class indices returned by torch.max to make a loss on predictions trainable

source: https://github.com/pytorch/pytorch/issues/95110
symptom: error
rule: GF105
shape: classifier training step: `_, predicted = torch.max(outputs, 1)`, `predicted.requires_grad = True`, MSE between predictions and labels
"""
import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 4))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
inputs = torch.randn(10, 6)
labels = torch.randint(0, 4, (10,))

optimizer.zero_grad()
outputs = model(inputs)
# the indices from torch.max carry no gradient: train on the scores
loss = nn.CrossEntropyLoss()(outputs, labels)
loss.backward()
optimizer.step()
print(round(loss.item(), 4), round(model[2].weight.grad.norm().item(), 4))
