"""With truncated BPTT the model re-initialises the decoder state from the encoder at every truncation chunk instead of continuing from the (detached) state at the end of the previous chunk, so later chunks are trained from the wrong state.

source: https://github.com/OpenNMT/OpenNMT-py/issues/1164
symptom: silent
rule: ?
shape: seq2seq nn.Module (GRU encoder, GRUCell decoder with state), trainer loop over truncated target chunks with backward/step per chunk and detached carried state, several batches
wrong: dropped-term
why: initialising the carried state to zeros before the chunk loop makes the model always continue from it, so the first chunk no longer starts from the encoder state and the encoder gets no gradient at all.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class Seq2Seq(nn.Module):
    def __init__(self, vocab=12, hidden=16):
        super().__init__()
        self.emb = nn.Embedding(vocab, hidden)
        self.encoder = nn.GRU(hidden, hidden)
        self.decoder = nn.GRUCell(hidden, hidden)
        self.out = nn.Linear(hidden, vocab)

    def forward(self, src, tgt, dec_state=None):
        _, enc_final = self.encoder(self.emb(src))
        state = enc_final[0] if dec_state is None else dec_state
        outputs = []
        for t in range(tgt.shape[0]):
            state = self.decoder(self.emb(tgt[t]), state)
            outputs.append(self.out(state))
        return torch.stack(outputs), state


model = Seq2Seq()
opt = torch.optim.SGD(model.parameters(), lr=0.5)
trunc_size = 3
for batch in range(6):
    src = torch.randint(0, 12, (5, 4))
    tgt_outer = torch.cat([src.flip(0), src.flip(0)])  # target: the reversed source, twice
    dec_state = torch.zeros(src.shape[1], 16)  # carry the decoder state from the start
    for j in range(0, tgt_outer.shape[0] - 1, trunc_size):
        tgt = tgt_outer[j: j + trunc_size]
        gold = tgt_outer[j + 1: j + 1 + trunc_size]
        tgt = tgt[: gold.shape[0]]
        opt.zero_grad()
        outputs, dec_state = model(src, tgt, dec_state)
        loss = F.cross_entropy(outputs.reshape(-1, 12), gold.reshape(-1))
        loss.backward()
        opt.step()
        dec_state = dec_state.detach()
print("last_chunk_loss", round(loss.item(), 4))
print("decoder_w_norm", round(model.decoder.weight_hh.norm().item(), 4))
print("encoder_w_norm", round(model.encoder.weight_hh_l0.norm().item(), 4))
