"""With native AMP the training loop clips gradients right after backward, while the precision plugin only unscales them later in pre_optimizer_step, so clipping acts on gradients still multiplied by the loss scale and the updates become tiny.

source: https://github.com/Lightning-AI/pytorch-lightning/issues/9599
symptom: silent
rule: ?
shape: trainer library: NativeMixedPrecisionPlugin (scale + backward, pre_optimizer_step unscale, step/update) driven by a training loop that calls clip_gradients between backward and the optimizer step
"""
import torch
import torch.nn as nn

torch.manual_seed(0)


class NativeMixedPrecisionPlugin:
    def __init__(self):
        self.scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 12)

    def backward(self, loss):
        self.scaler.scale(loss).backward()

    def pre_optimizer_step(self, optimizer):
        self.scaler.unscale_(optimizer)

    def optimizer_step(self, optimizer):
        self.pre_optimizer_step(optimizer)
        self.scaler.step(optimizer)
        self.scaler.update()


class TrainingLoop:
    def __init__(self, model, optimizer, plugin, gradient_clip_val=0.5):
        self.model, self.optimizer, self.plugin, self.gradient_clip_val = model, optimizer, plugin, gradient_clip_val

    def clip_gradients(self):
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.gradient_clip_val)

    def run_batch(self, x, y):
        self.optimizer.zero_grad()
        loss = nn.functional.mse_loss(self.model(x), y)
        self.plugin.backward(loss)
        self.clip_gradients()  # bench: bug
        self.plugin.optimizer_step(self.optimizer)
        return loss


model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
loop = TrainingLoop(model, opt, NativeMixedPrecisionPlugin())
w0 = model[0].weight.detach().clone()
for step in range(10):
    loss = loop.run_batch(torch.randn(32, 8), torch.randn(32, 1) * 2)
print("loss", round(loss.item(), 4))
print("weight change", round((model[0].weight - w0).norm().item(), 4))
