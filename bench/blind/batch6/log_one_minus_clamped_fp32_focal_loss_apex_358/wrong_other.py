"""The binary focal loss clamps predictions to [eps, 1 - eps] with eps=1e-8, but 1 - 1e-8 rounds to 1.0 in float32, so a saturated prediction still gives log(1 - 1) = -inf, 0 * -inf = nan, and nan gradients.

source: https://github.com/NVIDIA/apex/issues/358
symptom: nan-grad
rule: ?
shape: binary classifier nn.Module with sigmoid output and a FocalLoss nn.Module (clamp, pow focusing terms, log) trained with SGD
wrong: other
why: replaces the nan loss with torch.nan_to_num; the printed loss is finite but log's backward still divides by 1 - y_pred = 0, so the gradients stay nan
"""
import torch
import torch.nn as nn

torch.manual_seed(0)


class FocalLoss(nn.Module):
    def __init__(self, gamma=0.0, eps=1e-8):
        super().__init__()
        self.gamma, self.eps = gamma, eps

    def forward(self, y_pred, y_true):
        y_pred = torch.clamp(y_pred, self.eps, 1 - self.eps)
        y_true, y_pred = y_true.unsqueeze(1), y_pred.unsqueeze(1)
        loss = torch.sum(y_true * torch.pow(1 - y_pred, self.gamma) * torch.log(y_pred)
                         + (1 - y_true) * torch.pow(y_pred, self.gamma) * torch.log(1 - y_pred), dim=1)
        return torch.nan_to_num(-1.0 * loss.sum() / y_pred.size(0))


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(6, 16), nn.ReLU())
        self.head = nn.Linear(16, 1)

    def forward(self, x):
        return torch.sigmoid(self.head(self.body(x))).squeeze(1)


model = Classifier()
with torch.no_grad():
    model.body[0].weight[:, 0].abs_()
    model.head.weight.abs_()
criterion = FocalLoss()
x = torch.randn(32, 6)
x[3, 0] = 100.0  # one very confident sample: its sigmoid saturates to exactly 1.0
y = torch.randint(0, 2, (32,)).float()
y[3] = 1.0
loss = criterion(model(x), y)
loss.backward()
print("loss", round(loss.item(), 4))
print("head grad", round(model.head.weight.grad.norm().item(), 4))
print("body grad", round(model.body[0].weight.grad.norm().item(), 4))
