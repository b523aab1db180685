"""The recurrent layer keeps its hidden state across truncated-BPTT chunks without detaching it, so the second chunk's backward runs into the first chunk's freed graph.

source: https://github.com/NeuroTorch/NeuroTorch/pull/137
symptom: error
rule: ?
shape: library recurrent layer (leaky integrator nn.Module with stored hidden state), TBPTT trainer doing backward + step every chunk
"""
import torch
import torch.nn as nn

torch.manual_seed(0)


class LIFLayer(nn.Module):
    def __init__(self, n_in, n_hidden):
        super().__init__()
        self.fc_in = nn.Linear(n_in, n_hidden)
        self.fc_rec = nn.Linear(n_hidden, n_hidden, bias=False)
        self.hidden = None

    def forward(self, x):
        if self.hidden is None:
            self.hidden = x.new_zeros(x.size(0), self.fc_rec.in_features)
        self.hidden = 0.5 * self.hidden + torch.tanh(self.fc_in(x) + self.fc_rec(self.hidden))
        return self.hidden


class TBPTT:
    def __init__(self, layer, readout, optimizer, chunk=5):
        self.layer, self.readout, self.optimizer, self.chunk = layer, readout, optimizer, chunk

    def fit_sequence(self, xs, ys):
        losses = []
        for t0 in range(0, xs.size(0), self.chunk):
            self.optimizer.zero_grad()
            loss = 0.0
            for t in range(t0, t0 + self.chunk):
                loss = loss + (self.readout(self.layer(xs[t])) - ys[t]).pow(2).mean()
            loss.backward()
            self.optimizer.step()
            losses.append(loss.item())
            self.layer.hidden = self.layer.hidden.detach()
        return losses


torch.manual_seed(0)
layer = LIFLayer(3, 8)
readout = nn.Linear(8, 1)
opt = torch.optim.SGD(list(layer.parameters()) + list(readout.parameters()), lr=0.01)
xs = torch.randn(20, 4, 3)
ys = xs.sum(-1, keepdim=True).tanh()
losses = TBPTT(layer, readout, opt).fit_sequence(xs, ys)
print("losses", [round(v, 4) for v in losses])
print("rec weight norm", round(layer.fc_rec.weight.norm().item(), 4))
