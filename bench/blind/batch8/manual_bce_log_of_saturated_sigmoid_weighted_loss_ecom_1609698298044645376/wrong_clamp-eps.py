"""A hand-written weighted BCE takes torch.log(pred) and torch.log(1 - pred) of sigmoid outputs; once a sigmoid saturates to exactly 1.0 (or 0.0) in float32, 0 * log(0) gives nan in the loss and all gradients.

source: https://e-com-net.com/article/1609698298044645376.htm
symptom: nan-grad
rule: ?
shape: flat training script: small classifier nn.Sequential with sigmoid output, custom weighted binary cross-entropy written with torch.log, Adam, several steps
wrong: clamp-eps
why: in float32 1 - 1e-8 rounds to exactly 1.0, so the upper clamp does nothing and log(1 - pred) is still log(0) for saturated outputs; the loss and gradients stay nan (the page notes that 1e-8 still gives nan/inf).
"""
import torch
import torch.nn as nn

torch.manual_seed(0)

model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 1))
with torch.no_grad():
    model[2].weight.mul_(400.0)  # a confident (over-scaled) head, as after some training with a large lr
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
x = torch.randn(32, 6)
target = (x[:, :1] > 0).float()
pos_weight = 3.0

for step in range(3):
    optimizer.zero_grad()
    pred = torch.sigmoid(model(x))
    pred = torch.clamp(pred, min=1e-8, max=1 - 1e-8)
    loss = - pos_weight * target * torch.log(pred) - (1 - target) * torch.log(1 - pred)
    loss = loss.mean()
    loss.backward()
    grad_norm = model[0].weight.grad.norm()
    optimizer.step()
    print("step", step, "loss", round(loss.item(), 4), "grad norm", round(grad_norm.item(), 4))
