"""The decoder state's detach() calls h.detach_() on every state tensor for truncated BPTT, but input_feed is a view (outputs[-1].unsqueeze(0)), so detaching it in place raises "Can't detach views in-place".

source: https://github.com/OpenNMT/OpenNMT-py/issues/403
symptom: error
rule: ?
shape: RNN decoder (nn.Module with LSTMCell and attention-free input feeding) plus a DecoderState class, truncated-BPTT loop over target chunks with one optimizer step per batch
wrong: retain-graph
why: drops the detach and backs up with retain_graph=True, so the second chunk's loss backpropagates into the first chunk's graph and truncated BPTT becomes full BPTT with different gradients
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class RNNDecoderState:
    def __init__(self, hidden, input_feed):
        self.hidden = hidden
        self.input_feed = input_feed

    @property
    def _all(self):
        return self.hidden + (self.input_feed,)

    def update_state(self, hidden, input_feed):
        self.hidden = hidden
        self.input_feed = input_feed

    def detach(self):
        pass


class InputFeedDecoder(nn.Module):
    def __init__(self, vocab, emb, hid):
        super().__init__()
        self.embedding = nn.Embedding(vocab, emb)
        self.cell = nn.LSTMCell(emb + hid, hid)
        self.out = nn.Linear(hid, vocab)

    def forward(self, tgt, state):
        h, c = state.hidden
        feed = state.input_feed.squeeze(0)
        outputs = []
        for t in range(tgt.shape[0]):
            h, c = self.cell(torch.cat([self.embedding(tgt[t]), feed], -1), (h, c))
            feed = torch.tanh(h)
            outputs.append(feed)
        outputs = torch.stack(outputs)
        state.update_state((h, c), outputs[-1].unsqueeze(0))
        return self.out(outputs), state


vocab, batch, hid = 12, 3, 8
model = InputFeedDecoder(vocab, 6, hid)
optim = torch.optim.SGD(model.parameters(), lr=0.5)
tgt = torch.randint(0, vocab, (9, batch))
trunc_size = 4
optim.zero_grad()
state = RNNDecoderState((torch.zeros(batch, hid), torch.zeros(batch, hid)), torch.zeros(1, batch, hid))
total = 0.0
for j in range(0, tgt.shape[0] - 1, trunc_size):
    inp, gold = tgt[j : j + trunc_size], tgt[j + 1 : j + 1 + trunc_size]
    inp = inp[: gold.shape[0]]
    logits, state = model(inp, state)
    loss = F.cross_entropy(logits.reshape(-1, vocab), gold.reshape(-1))
    loss.backward(retain_graph=True)
    total += loss.item()
    state.detach()
grad_norm = model.cell.weight_hh.grad.norm().item()
optim.step()
print("loss", round(total, 4))
print("cell grad", round(grad_norm, 4))
print("emb grad", round(model.embedding.weight.grad.norm().item(), 4))
