"""VAD fine-tuning helper trains without optimizer.zero_grad() before loss.backward(): gradients accumulate over the whole epoch

source: https://github.com/snakers4/silero-vad/pull/699
symptom: wrong-value
rule: none
shape: tuning/utils.py-style train(config, loader, model, criterion, optimizer, device) with masked BCE over frames
wrong: other
why: zeroes the gradients once before the epoch instead of before every backward, so they still accumulate over all batches
"""
import torch
import torch.nn as nn


def train(config, loader, model, criterion, optimizer, device):
    model.train()
    optimizer.zero_grad()
    total = 0.0
    for i, (x, targets, masks) in enumerate(loader):
        x, targets, masks = x.to(device), targets.to(device), masks.to(device)
        stacked = model(x).squeeze(-1)
        loss = criterion(stacked, targets)
        loss = (loss * masks).mean()
        loss.backward()
        optimizer.step()
        total += loss.item()
    return total / len(loader)


torch.manual_seed(0)
device = torch.device("cpu")
model = nn.Sequential(nn.Linear(4, 1), nn.Sigmoid())
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
loader = [(torch.randn(3, 7, 4), torch.rand(3, 7).round(), torch.ones(3, 7)) for _ in range(12)]
loss = train({}, loader, model, nn.BCELoss(reduction="none"), optimizer, device)
print("train loss:", round(loss, 4))
print("bias:", round(model[0].bias.item(), 4))
