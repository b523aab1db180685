"""With gradient accumulation the ASR training loop divides each micro-batch loss by the running counter accum_n_steps (1, 2, 3, ...) instead of the accumulation length accum_grad_n_steps, so the micro-batches of one update get weights 1, 1/2, 1/3, 1/4 and the accumulated gradient is wrong.

source: https://github.com/hirofumi0810/neural_sp/pull/169
symptom: silent
rule: ?
shape: training script: encoder-decoder-style model, gradient accumulation over micro-batches with a step counter, gradient clipping, optimizer step and zero_grad every accum_grad_n_steps
"""
import torch
from torch import nn
import torch.nn.functional as F

torch.manual_seed(0)


class TinyASR(nn.Module):
    def __init__(self, feat=8, hidden=16, vocab=6):
        super().__init__()
        self.enc = nn.GRU(feat, hidden, batch_first=True)
        self.out = nn.Linear(hidden, vocab)

    def forward(self, xs, ys):
        h, _ = self.enc(xs)
        return F.cross_entropy(self.out(h).reshape(-1, self.out.out_features), ys.reshape(-1))


model = TinyASR()
optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
accum_grad_n_steps = 4
clip_grad_norm = 5.0
data = [(torch.randn(2, 5, 8), torch.randint(0, 6, (2, 5))) for _ in range(8)]

accum_n_steps = 0
loss_train = 0.0
for xs, ys in data:
    accum_n_steps += 1
    if accum_n_steps == 1:
        loss_train = 0.0  # average over gradient accumulation
    loss = model(xs, ys)
    loss = loss / accum_grad_n_steps
    loss.backward()
    if accum_n_steps >= accum_grad_n_steps:
        total_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip_grad_norm)
        optimizer.step()
        optimizer.zero_grad()
        accum_n_steps = 0
    loss_train += loss.item()

print("loss_train", round(loss_train, 4))
print("last total grad norm", round(total_norm.item(), 4))
print("out weight norm", round(model.out.weight.norm().item(), 4))
