"""The script computes log(1 + exp(x)) as exp().log1p() and uses torch.where to replace the overflowing (inf) entries by x, but the unselected exp/log1p branch still sends inf * 0 = nan into the backward, so large inputs get nan gradients.

source: https://thinbug.com/q/56667596
symptom: nan-grad
rule: ?
shape: flat heteroscedastic-regression script: linear mean and scale heads, scale = log(1 + exp(raw)) with a where-guard for overflow, Gaussian NLL, Adam training loop over several steps
wrong: clamp-eps
why: clamping the input before exp makes everything finite, but for raw > 80 the output is stuck at 80 instead of raw and the clamp passes zero gradient, so those samples stop training the scale head.
"""
import torch
import torch.nn as nn

torch.manual_seed(0)

x = torch.randn(64, 4)
x[:4, 2] = 150.0  # a few samples with a very large third feature
y = x[:, :1] * 0.5 + torch.randn(64, 1) * (1 + x[:, 1:2].abs())
mean_head = nn.Linear(4, 1)
scale_head = nn.Linear(4, 1)
with torch.no_grad():
    mean_head.weight[:, 2] = 0.0
    scale_head.weight.copy_(torch.tensor([[0.1, 0.3, 0.7, 0.1]]))
    scale_head.bias.fill_(0.5)
opt = torch.optim.Adam(list(mean_head.parameters()) + list(scale_head.parameters()), lr=1e-2)


def log_1_plus_exp(raw):
    exp = raw.clamp(max=80.0).exp()
    return raw.where(torch.isinf(exp), exp.log1p())  # Replace infs with x


for step in range(20):
    opt.zero_grad()
    raw = scale_head(x)
    sigma = log_1_plus_exp(raw) + 1e-3
    nll = (torch.log(sigma) + 0.5 * ((y - mean_head(x)) / sigma) ** 2).mean()
    nll.backward()
    if step == 0:
        g0 = scale_head.weight.grad.norm().item()
    opt.step()
print("nll", round(nll.item(), 4))
print("scale_grad_norm_step0", round(g0, 4))
print("scale_weight_norm", round(scale_head.weight.norm().item(), 4))
