"""The trainer clips the gradient norm while the gradients are still multiplied by the AMP loss scale, so clipping shrinks every update by the scale factor.

source: https://github.com/NCAR/miles-credit/pull/141
symptom: silent
rule: ?
shape: Trainer class train_one_epoch with GradScaler (scale, backward, clip_grad_norm_, step, update)
"""
import torch
import torch.nn as nn

torch.manual_seed(0)


class Trainer:
    def __init__(self, model, optimizer, grad_max_norm=1.0):
        self.model = model
        self.optimizer = optimizer
        self.scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
        self.grad_max_norm = grad_max_norm

    def train_one_epoch(self, batches):
        for x, y in batches:
            self.optimizer.zero_grad()
            loss = nn.functional.mse_loss(self.model(x), y)
            self.scaler.scale(loss).backward()
            self.scaler.unscale_(self.optimizer)
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_max_norm)
            self.scaler.step(self.optimizer)
            self.scaler.update()
        return loss


model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
batches = [(torch.randn(32, 8), torch.randn(32, 1) * 3) for _ in range(10)]
w0 = model[0].weight.detach().clone()
trainer = Trainer(model, opt)
loss = trainer.train_one_epoch(batches)
print("loss", round(loss.item(), 4))
print("weight change", round((model[0].weight - w0).norm().item(), 4))
