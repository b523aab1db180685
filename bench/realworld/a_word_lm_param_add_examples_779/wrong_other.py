"""word_language_model updates the parameters by hand with `p.add_(-lr, p.grad)` outside no_grad

source: https://github.com/pytorch/examples/pull/779
symptom: error
rule: GF201
shape: training loop, manual SGD step over `model.parameters()` after clip_grad_norm_
wrong: other
why: rebinds the loop variable to the out-of-place update, so no parameter is ever changed and the model never trains
"""
import torch
import torch.nn as nn


class RNNModel(nn.Module):
    """Container module with an encoder, a recurrent module, and a decoder."""

    def __init__(self, ntoken, ninp, nhid, nlayers):
        super(RNNModel, self).__init__()
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, nhid, nlayers)
        self.decoder = nn.Linear(nhid, ntoken)

    def forward(self, input, hidden):
        emb = self.encoder(input)
        output, hidden = self.rnn(emb, hidden)
        decoded = self.decoder(output)
        return decoded.view(-1, decoded.size(-1)), hidden

    def init_hidden(self, bsz, nhid, nlayers):
        weight = next(self.parameters())
        return (weight.new_zeros(nlayers, bsz, nhid), weight.new_zeros(nlayers, bsz, nhid))


def repackage_hidden(h):
    """Wraps hidden states in new Tensors, to detach them from their history."""
    if isinstance(h, torch.Tensor):
        return h.detach()
    else:
        return tuple(repackage_hidden(v) for v in h)


torch.manual_seed(0)
ntokens, bptt, batch_size, lr, clip = 20, 5, 4, 20.0, 0.25
model = RNNModel(ntokens, 8, 8, 1)
criterion = nn.NLLLoss()
train_data = torch.randint(0, ntokens, (bptt * 3 + 1, batch_size))

model.train()
hidden = model.init_hidden(batch_size, 8, 1)
for i in range(0, train_data.size(0) - 1, bptt):
    data, targets = train_data[i:i + bptt], train_data[i + 1:i + 1 + bptt].reshape(-1)
    model.zero_grad()
    hidden = repackage_hidden(hidden)
    output, hidden = model(data, hidden)
    loss = criterion(torch.log_softmax(output, dim=-1), targets)
    loss.backward()

    # `clip_grad_norm` helps prevent the exploding gradient problem in RNNs / LSTMs.
    torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    for p in model.parameters():
        p = p - lr * p.grad

print(round(loss.item(), 4), round(model.decoder.weight.norm().item(), 4))
