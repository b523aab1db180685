"""The network keeps its variable number of hidden layers in a plain Python list, so nn.Module does not register them and the optimizer never updates them.

source: https://github.com/pytorch/pytorch/issues/666
symptom: no-training
rule: ?
shape: nn.Module with a configurable stack of nn.Linear layers in a list, Adam training loop over several steps
"""
import torch
import torch.nn as nn

torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self, num_layers):
        super(Net, self).__init__()
        self.layer = nn.Linear(4, 8)
        self.list_of_layers = nn.ModuleList([nn.Linear(8, 8) for i in range(num_layers)])
        self.out = nn.Linear(8, 1)

    def forward(self, x):
        x = torch.tanh(self.layer(x))
        for l in self.list_of_layers:
            x = torch.tanh(l(x))
        return self.out(x)


n = Net(3)
x = torch.randn(64, 4)
y = (x[:, :1] * x[:, 1:2] - x[:, 2:3]).tanh()
opt = torch.optim.Adam(n.parameters(), lr=0.01)
w0 = n.list_of_layers[0].weight.detach().clone()
for step in range(30):
    opt.zero_grad()
    loss = ((n(x) - y) ** 2).mean()
    loss.backward()
    opt.step()
print("n_params", sum(p.numel() for p in n.parameters()))
print("loss", round(loss.item(), 4))
print("hidden0_drift", round((n.list_of_layers[0].weight - w0).norm().item(), 4))
