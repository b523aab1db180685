"""The learnable task weights of AutomaticWeightedLoss live in a separate module that is never given to the optimizer, so they stay at 1 for the whole training.

source: https://github.com/Mikoto10032/AutomaticWeightedLoss/issues/3
symptom: no-training
rule: ?
shape: multi-task training loop: shared model with two heads, a loss nn.Module holding learnable weights, Adam with weight decay
wrong: detach
why: passing awl.params.data hands the optimizer a detached alias that never receives a gradient, so the task weights are still never updated.
"""
import torch
import torch.nn as nn
from torch import optim

torch.manual_seed(0)


class AutomaticWeightedLoss(nn.Module):
    """automatically weighted multi-task loss"""

    def __init__(self, num=2):
        super(AutomaticWeightedLoss, self).__init__()
        params = torch.ones(num, requires_grad=True)
        self.params = torch.nn.Parameter(params)

    def forward(self, *x):
        loss_sum = 0
        for i, loss in enumerate(x):
            loss_sum += 0.5 / (self.params[i] ** 2) * loss + torch.log(1 + self.params[i] ** 2)
        return loss_sum


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(6, 16), nn.ReLU())
        self.reg_head = nn.Linear(16, 1)
        self.cls_head = nn.Linear(16, 3)

    def forward(self, x):
        h = self.trunk(x)
        return self.reg_head(h).squeeze(-1), self.cls_head(h)


model = Model()
awl = AutomaticWeightedLoss(2)  # we have 2 losses
optimizer = optim.Adam([
    {'params': model.parameters()},
    {'params': [awl.params.data], 'weight_decay': 0}
], lr=0.05, weight_decay=1e-2)

x = torch.randn(32, 6)
y_reg = x[:, 0] * 3.0 + 0.5 * torch.randn(32)
y_cls = (x[:, 1] > 0).long() + (x[:, 2] > 1).long()

for step in range(20):
    optimizer.zero_grad()
    pred_reg, pred_cls = model(x)
    loss_1 = nn.functional.mse_loss(pred_reg, y_reg)
    loss_2 = nn.functional.cross_entropy(pred_cls, y_cls)
    loss_sum = awl(loss_1, loss_2)
    loss_sum.backward()
    optimizer.step()

print("loss", round(loss_sum.item(), 4))
print("awl params", [round(v, 4) for v in awl.params.tolist()])
print("awl grad norm", round(awl.params.grad.norm().item(), 4))
