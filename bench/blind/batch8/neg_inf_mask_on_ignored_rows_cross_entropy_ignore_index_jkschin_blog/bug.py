"""The vocabulary mask sets whole rows of the logits to -inf for positions whose target is ignore_index; CrossEntropyLoss drops their loss, but their softmax is 0/0 = nan and its backward multiplies the zero loss weight by nan, so every gradient becomes nan after the first step.

source: https://jkschin.com/blog/2023/cross-entropy-loss-ignore-index/
symptom: nan-grad
rule: ?
shape: small GPT-style language model (embedding + transformer-free MLP head) whose logits get an additive -inf vocabulary mask, CrossEntropyLoss(ignore_index=-1), Adam training loop, several steps
"""
import torch
import torch.nn as nn

torch.manual_seed(0)

V, D, T = 6, 16, 5


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.mlp = nn.Sequential(nn.Linear(D, D), nn.GELU(), nn.Linear(D, V))

    def forward(self, idx):
        return self.mlp(self.emb(idx))


model = TinyLM()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
criterion = nn.CrossEntropyLoss(ignore_index=-1)

idx = torch.tensor([1, 3, 0, 2, 4])
targets = torch.tensor([0, 1, -1, -1, -1])  # only the first two positions are supervised
ninf = float('-inf')
mask = torch.zeros(T, V)
mask[:2, 2:] = ninf  # allowed vocabulary for the supervised positions: tokens 0 and 1
mask[2:, :] = ninf  # bench: bug

for step in range(3):
    optimizer.zero_grad()
    logits = model(idx) + mask
    loss = criterion(logits, targets)
    loss.backward()
    grad_norm = model.mlp[2].weight.grad.norm()
    optimizer.step()
    print("step", step, "loss", round(loss.item(), 4), "head grad norm", round(grad_norm.item(), 4))
