"""The Snake activation wraps its frequency a in nn.Parameter and then calls .squeeze() on it, so the module holds a plain non-leaf tensor: a is not registered, not in the optimizer, and never trains.

source: https://github.com/EdwardDixon/snake/pull/2
symptom: no-training
rule: ?
shape: nn.Module activation with a learnable per-feature parameter inside an MLP, Adam training loop
wrong: other
why: builds a as a plain tensor with requires_grad_(); its .grad fills in, but it is still not a registered Parameter, so model.parameters() and the optimizer never see it
"""
import torch
import torch.nn as nn

torch.manual_seed(0)


class Snake(nn.Module):
    def __init__(self, in_features, a=1.0):
        super().__init__()
        self.in_features = in_features
        self.a = (torch.ones(1, in_features) * a).squeeze().requires_grad_()

    def forward(self, x):
        return x + (1.0 / (self.a + 1e-9)) * torch.pow(torch.sin(x * self.a), 2)


model = nn.Sequential(nn.Linear(1, 16), Snake(16), nn.Linear(16, 1))
opt = torch.optim.Adam(model.parameters(), lr=0.05)
x = torch.linspace(-3, 3, 64).unsqueeze(-1)
y = torch.sin(3 * x)
for step in range(20):
    opt.zero_grad()
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    opt.step()
print("loss", round(loss.item(), 4))
print("n params", sum(p.numel() for p in model.parameters()))
print("snake a mean", round(model[1].a.mean().item(), 4))
