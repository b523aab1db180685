"""FocalLoss takes torch.log(p_t) of the predicted probability, so a saturated sigmoid output (p_t exactly 0) gives an infinite loss and nan gradients.

source: https://github.com/mathiaszinnen/focal_loss_torch/issues/3
symptom: nan-grad
rule: ?
shape: loss nn.Module (focal loss on sigmoid probabilities, torch.where on target) in a binary-classifier training loop with SGD
wrong: clamp-eps
why: clamping p_t at 1e-3 removes the nan but cuts the gradient of every sample with p_t below 1e-3 (the badly misclassified ones) and caps their loss, so the hardest examples stop contributing.
"""
import torch
import torch.nn as nn

torch.manual_seed(0)


class FocalLoss(nn.Module):
    def __init__(self, alpha=1, gamma=2, reduction: str = 'mean'):
        super().__init__()
        if reduction not in ['mean', 'none', 'sum']:
            raise NotImplementedError('Reduction {} not implemented.'.format(reduction))
        self.reduction = reduction
        self.alpha = alpha
        self.gamma = gamma

    def forward(self, x, target):
        p_t = torch.where(target == 1, x, 1 - x)
        fl = - 1 * (1 - p_t) ** self.gamma * torch.log(p_t.clamp(min=1e-3))
        fl = torch.where(target == 1, fl * self.alpha, fl * (1 - self.alpha))
        return self._reduce(fl)

    def _reduce(self, x):
        if self.reduction == 'mean':
            return x.mean()
        elif self.reduction == 'sum':
            return x.sum()
        else:
            return x


model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
criterion = FocalLoss(alpha=0.75, gamma=2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

features = torch.randn(16, 4)
target = (features[:, 0] > 0).float()
with torch.no_grad():
    model[2].weight.mul_(25.0)  # an over-confident head: some outputs saturate to exactly 1.0
    model[2].bias.fill_(8.0)

for step in range(3):
    optimizer.zero_grad()
    x = torch.sigmoid(model(features)).squeeze(-1)
    loss = criterion(x, target)
    loss.backward()
    grad_norm = torch.cat([p.grad.flatten() for p in model.parameters()]).norm()
    optimizer.step()

print("loss", round(loss.item(), 4))
print("grad norm", round(grad_norm.item(), 4))
print("head bias", round(model[2].bias.item(), 4))
