"""MetaOptimizer keeps its LSTM cells in a plain Python list, so their weights are not module parameters and the meta-optimizer never trains them.

source: https://github.com/ikostrikov/pytorch-meta-optimizer/issues/11
symptom: no-training
rule: ?
shape: learned-optimizer nn.Module (linear in, stacked LSTM cells, linear out) trained with Adam on a regression loss
"""
import torch
import torch.nn as nn

torch.manual_seed(0)


class LayerNormLSTMCell(nn.Module):
    def __init__(self, n, h):
        super().__init__()
        self.cell = nn.LSTMCell(n, h)
        self.ln = nn.LayerNorm(h)

    def forward(self, x, state):
        h, c = self.cell(x, state)
        return self.ln(h), c


class MetaOptimizer(nn.Module):
    def __init__(self, hidden_size=8, num_layers=2):
        super().__init__()
        self.hidden_size = hidden_size
        self.linear1 = nn.Linear(3, hidden_size)
        self.lstms = nn.Sequential(*[LayerNormLSTMCell(hidden_size, hidden_size)
                                     for _ in range(num_layers)])
        self.linear2 = nn.Linear(hidden_size, 1)

    def forward(self, x):
        x = torch.tanh(self.linear1(x))
        for lstm in self.lstms:
            zeros = x.new_zeros(x.size(0), self.hidden_size)
            x, _ = lstm(x, (zeros, zeros))
        return self.linear2(x)


model = MetaOptimizer()
opt = torch.optim.Adam(model.parameters(), lr=0.05)
x = torch.randn(32, 3)
y = x.sum(1, keepdim=True)
w0 = list(model.lstms)[0].cell.weight_ih.detach().clone()
for step in range(20):
    opt.zero_grad()
    loss = (model(x) - y).pow(2).mean()
    loss.backward()
    opt.step()
print("n_params", sum(p.numel() for p in model.parameters()))
print("loss", round(loss.item(), 4))
print("lstm0 weight change", round((list(model.lstms)[0].cell.weight_ih - w0).norm().item(), 4))
