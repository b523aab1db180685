"""MuReNNDirect keeps its per-octave learnable Conv1d filters and gains in plain Python lists, so none of them is registered: model.parameters() misses them, the optimizer never sees them and they keep their initial values.

source: https://github.com/kymatio/murenn/issues/42
symptom: no-training
rule: ?
shape: library layer (multiresolution filterbank nn.Module with one Conv1d per octave and per-octave gains) in a small regressor, Adam training loop
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class MuReNNDirect(nn.Module):
    def __init__(self, J=3, Q=4, T=5):
        super().__init__()
        self.J = J
        self.down = [nn.Conv1d(1, Q, T, padding=T // 2, bias=False) for _ in range(J)]  # bench: bug
        self.gains = [nn.Parameter(torch.ones(Q)) for _ in range(J)]  # bench: bug

    def forward(self, x):
        outs = []
        for j in range(self.J):
            xj = F.avg_pool1d(x, 2**j) if j > 0 else x
            yj = self.down[j](xj) * self.gains[j].view(1, -1, 1)
            outs.append(yj.abs().mean(-1))
        return torch.cat(outs, 1)


class Regressor(nn.Module):
    def __init__(self):
        super().__init__()
        self.frontend = MuReNNDirect()
        self.head = nn.Linear(12, 1)

    def forward(self, x):
        return self.head(self.frontend(x))


model = Regressor()
w0 = model.frontend.down[0].weight.detach().clone()
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
x, y = torch.randn(8, 1, 32), torch.randn(8, 1)
for step in range(10):
    opt.zero_grad()
    loss = F.mse_loss(model(x), y)
    loss.backward()
    opt.step()
print("loss", round(loss.item(), 4))
print("n params", sum(p.numel() for p in model.parameters()))
print("filter change", round((model.frontend.down[0].weight.detach() - w0).norm().item(), 4))
