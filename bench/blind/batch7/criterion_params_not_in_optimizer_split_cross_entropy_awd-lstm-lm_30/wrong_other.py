"""The optimizer is built from model.parameters() only, but SplitCrossEntropyLoss owns trainable tail_vectors/tail_bias (the tombstone logits of the split softmax), so they stay at their zero initialisation.

source: https://github.com/salesforce/awd-lstm-lm/issues/30
symptom: no-training
rule: ?
shape: LSTM language model (nn.Module with Embedding/LSTM) plus a loss module with its own Parameters, SGD training loop
wrong: other
why: adds only tail_bias to the optimizer; tail_vectors still get gradients that are never applied, so the tombstone logits cannot depend on the hidden state
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class SplitCrossEntropyLoss(nn.Module):
    def __init__(self, hidden_size, split):
        super().__init__()
        self.split = split
        self.tail_vectors = nn.Parameter(torch.zeros(1, hidden_size))
        self.tail_bias = nn.Parameter(torch.zeros(1))

    def forward(self, weight, bias, hiddens, targets):
        s = self.split
        head_logits = hiddens @ weight[:s].t() + bias[:s]
        tomb = hiddens @ self.tail_vectors.t() + self.tail_bias
        head_lp = F.log_softmax(torch.cat([head_logits, tomb], -1), -1)
        tail_lp = F.log_softmax(hiddens @ weight[s:].t() + bias[s:], -1)
        in_head = targets < s
        lp_head = head_lp.gather(1, targets.clamp(max=s - 1).unsqueeze(1)).squeeze(1)
        lp_tail = head_lp[:, -1] + tail_lp.gather(1, (targets - s).clamp(min=0).unsqueeze(1)).squeeze(1)
        return -torch.where(in_head, lp_head, lp_tail).mean()


class RNNModel(nn.Module):
    def __init__(self, ntoken, nhid):
        super().__init__()
        self.encoder = nn.Embedding(ntoken, nhid)
        self.rnn = nn.LSTM(nhid, nhid)
        self.decoder = nn.Linear(nhid, ntoken)
        self.decoder.weight = self.encoder.weight

    def forward(self, inp):
        out, _ = self.rnn(self.encoder(inp))
        return out.view(-1, out.size(-1))


ntoken, nhid = 20, 8
model = RNNModel(ntoken, nhid)
criterion = SplitCrossEntropyLoss(nhid, split=10)
params = list(model.parameters()) + [criterion.tail_bias]
optimizer = torch.optim.SGD(params, lr=1.0)
data = torch.randint(0, ntoken, (7, 4))
targets = torch.randint(0, ntoken, (7, 4)).view(-1)
for step in range(10):
    optimizer.zero_grad()
    h = model(data)
    loss = criterion(model.decoder.weight, model.decoder.bias, h, targets)
    loss.backward()
    optimizer.step()
print("loss", round(loss.item(), 4))
print("tail_vectors norm", round(criterion.tail_vectors.norm().item(), 4))
print("tail_bias", round(criterion.tail_bias.item(), 4))
