"""The InfoNCE loss masks padded hard negatives with -inf and only then divides by the learned temperature, so the division's backward multiplies a zero gradient by -inf and the temperature gradient is nan.

source: https://github.com/NVIDIA-NeMo/Automodel/pull/3850
symptom: nan-grad
rule: ?
shape: retrieval bi-encoder (query/document linear encoders) with a loss nn.Module holding a learned temperature, in-batch + padded hard negatives
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class InfoNCELoss(nn.Module):
    def __init__(self, temperature=0.05):
        super().__init__()
        self.log_temperature = nn.Parameter(torch.tensor(temperature).log())

    def forward(self, q, d_pos, d_neg, neg_mask):
        temperature = self.log_temperature.exp()
        in_batch = q @ d_pos.t()
        hard = torch.einsum("bd,bnd->bn", q, d_neg)
        hard = hard.masked_fill(~neg_mask, float("-inf"))  # bench: bug
        logits = torch.cat([in_batch, hard], dim=1) / temperature  # bench: bug
        labels = torch.arange(q.size(0))
        return F.cross_entropy(logits, labels)


q_enc, d_enc = nn.Linear(12, 8), nn.Linear(12, 8)
loss_fn = InfoNCELoss()
q = F.normalize(q_enc(torch.randn(4, 12)), dim=-1)
d_pos = F.normalize(d_enc(torch.randn(4, 12)), dim=-1)
d_neg = F.normalize(d_enc(torch.randn(4, 3, 12)), dim=-1)
neg_mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 1]], dtype=torch.bool)
loss = loss_fn(q, d_pos, d_neg, neg_mask)
loss.backward()
print("loss", round(loss.item(), 4))
g = loss_fn.log_temperature.grad
print("temperature grad", None if g is None else round(g.item(), 4))
print("query encoder grad", round(q_enc.weight.grad.norm().item(), 4))
