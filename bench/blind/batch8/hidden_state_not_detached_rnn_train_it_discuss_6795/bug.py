"""The recurrent model keeps its hidden state on `self` across calls to train_it without detaching it, so the second loss.backward() walks back into the previous step's graph, whose buffers were already freed.

source: https://discuss.pytorch.org/t/runtimeerror-trying-to-backward-through-the-graph-a-second-time-but-the-buffers-have-already-been-freed-specify-retain-graph-true-when-calling-backward-the-first-time/6795
symptom: error
rule: ?
shape: small recurrent nn.Module that stores its hidden state in forward, a train_it(x, y) method (forward, MSE loss, backward, manual SGD update on .data), called once per time step in a loop
"""
import torch
import torch.nn as nn

torch.manual_seed(0)


class OneNodeRNN(nn.Module):
    def __init__(self, n_in=3, n_hidden=5, lr=0.05):
        super().__init__()
        self.i2h = nn.Linear(n_in + n_hidden, n_hidden)
        self.h2o = nn.Linear(n_hidden, 1)
        self.hidden = torch.zeros(1, n_hidden)
        self.loss = nn.MSELoss()
        self.lr = lr

    def forward(self, x):
        self.hidden = torch.tanh(self.i2h(torch.cat([x, self.hidden], dim=1)))
        return self.h2o(self.hidden)

    def train_it(self, x, y):
        self.zero_grad()
        prediction = self(x)  # bench: bug
        loss = self.loss(prediction, y)
        loss.backward()
        for p in self.parameters():
            p.data.add_(p.grad.data, alpha=-self.lr)
        return loss


model = OneNodeRNN()
xs = torch.randn(8, 1, 3)
ys = torch.sin(torch.arange(8.0)).view(8, 1, 1)

for t in range(8):
    loss = model.train_it(xs[t], ys[t])

print("loss", round(loss.item(), 4))
print("i2h grad norm", round(model.i2h.weight.grad.norm().item(), 4))
print("h2o weight norm", round(model.h2o.weight.norm().item(), 4))
