"""AverageMeter.update(out_criterion["loss"]) stores the loss tensor: every step's graph stays referenced and memory grows until cuDNN fails

source: https://github.com/lyq133/LIC-HPCM/issues/4
symptom: memory-growth
rule: GF403
shape: train_one_epoch with an AverageMeter created before the loop and a criterion returning a dict of losses
wrong: detach
why: detaches the loss before backward and re-enables grad on it, so backward reaches no parameter and the model never trains
"""
import torch
import torch.nn as nn


class AverageMeter:
    """Compute running average."""

    def __init__(self):
        self.val = 0
        self.avg = 0
        self.sum = 0
        self.count = 0

    def update(self, val, n=1):
        self.val = val
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count


class RateDistortionLoss(nn.Module):
    def forward(self, output, target):
        out = {}
        out["mse_loss"] = ((output - target) ** 2).mean()
        out["loss"] = 100 * out["mse_loss"]
        return out


def train_one_epoch(model, criterion, train_dataloader, optimizer):
    model.train()
    loss = AverageMeter()
    for i, d in enumerate(train_dataloader):
        optimizer.zero_grad()
        out_net = model(d)
        out_criterion = criterion(out_net, d)
        out_criterion["loss"] = out_criterion["loss"].detach().requires_grad_()
        out_criterion["loss"].backward()
        optimizer.step()
        loss.update(out_criterion["loss"].item())
    return loss


torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 4), nn.ReLU(), nn.Linear(4, 8))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
train_dataloader = [torch.randn(16, 8) for _ in range(20)]
meter = train_one_epoch(model, RateDistortionLoss(), train_dataloader, optimizer)
print("avg loss:", round(float(meter.avg), 4))
print("meter keeps a graph alive:", torch.is_tensor(meter.sum) and meter.sum.grad_fn is not None)
