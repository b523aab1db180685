"""The RNN search loop feeds each batch the hidden state returned by the previous batch without repackaging (detaching) it, so the second backward walks into the already freed graph of the first batch.

source: https://github.com/quark0/darts/issues/56
symptom: error
rule: ?
shape: DARTS RNN train_search loop, truncated BPTT over batches with a hidden state carried across batches
"""
import torch
import torch.nn as nn

torch.manual_seed(0)


class RNNModelSearch(nn.Module):
    def __init__(self, ntoken=20, ninp=8, nhid=8):
        super().__init__()
        self.encoder = nn.Embedding(ntoken, ninp)
        self.cell = nn.RNNCell(ninp, nhid, nonlinearity="tanh")
        self.decoder = nn.Linear(nhid, ntoken)
        self.nhid = nhid

    def init_hidden(self, bsz):
        return torch.zeros(bsz, self.nhid)

    def forward(self, inp, hidden):
        outs = []
        for t in range(inp.size(0)):
            hidden = self.cell(self.encoder(inp[t]), hidden)
            outs.append(hidden)
        return self.decoder(torch.stack(outs)), hidden


def repackage_hidden(h):
    if isinstance(h, torch.Tensor):
        return h.detach()
    return tuple(repackage_hidden(v) for v in h)


model = RNNModelSearch()
optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
criterion = nn.CrossEntropyLoss()
data = torch.randint(0, 20, (4 * 5 + 1, 3))
bptt = 5
hidden = model.init_hidden(3)

for i in range(0, 4 * bptt, bptt):
    inp, targets = data[i:i + bptt], data[i + 1:i + 1 + bptt]
    optimizer.zero_grad()
    log_prob, hidden = model(inp, hidden)  # bench: bug
    loss = criterion(log_prob.view(-1, 20), targets.reshape(-1))
    loss.backward()
    optimizer.step()

g = torch.sqrt(sum((p.grad ** 2).sum() for p in model.parameters()))
print("loss", round(loss.item(), 4))
print("grad_norm", round(g.item(), 4))
print("cell_whh_grad", round(model.cell.weight_hh.grad.norm().item(), 4))
