"""The learnable threshold is only used in a boolean comparison that selects which rows enter the loss, and a comparison is not differentiable, so threshold.grad stays None and the optimizer never moves it.

source: https://discuss.pytorch.org/t/optimize-masking-parameter/204381
symptom: none-grad
rule: ?
shape: flat script optimizing a point set X and a scalar threshold parameter that masks rows of X by their norm, Adam with two parameter groups, loop over several steps
"""
import torch

torch.manual_seed(2024)

X = torch.randn(200, 3, requires_grad=True)
threshold = torch.tensor(1.5, requires_grad=True)
target = 1.2
opt = torch.optim.Adam([{"params": [X], "lr": 1e-3}, {"params": [threshold], "lr": 0.05}])

for step in range(30):
    opt.zero_grad()
    X_norm = X.norm(dim=1)
    hard = 10.0  # larger values make the mask "harder"
    soft_mask = torch.sigmoid(hard * (threshold - X_norm))
    kept_mean = (soft_mask * X_norm).sum() / soft_mask.sum()  # weighted mean
    loss = (kept_mean - target) ** 2
    loss.backward()
    if step == 0:
        print("threshold_grad_is_none", threshold.grad is None)
    opt.step()
print("loss", round(loss.item(), 4))
print("threshold", round(threshold.item(), 4))
print("X_norm_mean", round(X.norm(dim=1).mean().item(), 4))
