"""The trainer zeroes the gradients before every micro-batch even when gradient accumulation is on, so each optimizer step only uses the last micro-batch's gradient.

source: https://github.com/HorizonRobotics/alf/pull/1788
symptom: silent
rule: ?
shape: algorithm/trainer class with grad_acc_steps: per micro-batch zero_grad, backward of the scaled loss, optimizer step every grad_acc_steps
"""
import torch
import torch.nn as nn

torch.manual_seed(0)


class Algorithm:
    def __init__(self, model, optimizer, grad_acc_steps=4):
        self.model = model
        self.optimizer = optimizer
        self.grad_acc_steps = grad_acc_steps
        self._acc = 0

    def update_with_gradient(self, loss):
        (loss / self.grad_acc_steps).backward()
        self._acc += 1
        if self._acc % self.grad_acc_steps == 0:
            self.optimizer.step()
            self.optimizer.zero_grad()
            return True
        return False


model = nn.Linear(5, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.5)
alg = Algorithm(model, opt)
w = torch.randn(5, 1)
grad_norm = None
for i in range(8):
    x = torch.randn(16, 5)
    loss = (model(x) - x @ w).pow(2).mean()
    if i == 3:
        grad_norm = model.weight.grad.norm().item() if model.weight.grad is not None else 0.0
    alg.update_with_gradient(loss)
print("loss", round(loss.item(), 4))
print("accumulated grad norm before step 1", round(grad_norm, 4))
print("weight", round(model.weight.norm().item(), 4))
