"""Sets `.requires_grad = True` on the class indices returned by torch.max to make a loss on predictions trainable

source: https://github.com/pytorch/pytorch/issues/95110
symptom: error
rule: GF105
shape: classifier training step: `_, predicted = torch.max(outputs, 1)`, `predicted.requires_grad = True`, MSE between predictions and labels
wrong: forward-change
why: regresses the max score onto the class index instead of training the class scores, so the loss and its gradient are a different objective
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
predicted = outputs.max(1).values  # differentiable, unlike the indices
loss = nn.MSELoss()(predicted, labels.float())
loss.backward()
optimizer.step()
print(round(loss.item(), 4), round(model[2].weight.grad.norm().item(), 4))
