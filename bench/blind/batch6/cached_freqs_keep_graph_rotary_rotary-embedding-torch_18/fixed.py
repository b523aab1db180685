"""The rotary embedding caches the frequencies it computed with the graph attached; once the frequency Parameter requires grad, the next step reuses the cached tensor and backward runs into the freed graph of the previous step.

source: https://github.com/lucidrains/rotary-embedding-torch/issues/18
symptom: error
rule: ?
shape: attention block with a RotaryEmbedding nn.Module that caches per-position frequencies; fine-tuning loop after unfreezing all parameters
"""
import torch
import torch.nn as nn

torch.manual_seed(0)


class RotaryEmbedding(nn.Module):
    def __init__(self, dim, theta=10000, learned_freq=False):
        super().__init__()
        freqs = 1.0 / (theta ** (torch.arange(0, dim, 2).float() / dim))
        self.freqs = nn.Parameter(freqs, requires_grad=learned_freq)
        self.learned_freq = learned_freq
        self.cached_freqs = None

    def forward(self, seq_len):
        if not self.learned_freq and self.cached_freqs is not None and seq_len <= self.cached_freqs.shape[0]:
            return self.cached_freqs[:seq_len]
        t = torch.arange(seq_len, dtype=self.freqs.dtype)
        freqs = torch.einsum("i,f->if", t, self.freqs).repeat_interleave(2, dim=-1)
        if not self.learned_freq:
            self.cached_freqs = freqs.detach()
        return freqs

    def rotate(self, x):
        freqs = self.forward(x.shape[-2])
        x1, x2 = x[..., 0::2], x[..., 1::2]
        rot = torch.stack((-x2, x1), dim=-1).flatten(-2)
        return x * freqs.cos() + rot * freqs.sin()


class Attention(nn.Module):
    def __init__(self, dim=8):
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim)
        self.rotary = RotaryEmbedding(dim)

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k = self.rotary.rotate(q), self.rotary.rotate(k)
        attn = (q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5).softmax(-1)
        return attn @ v


model = Attention()
for p in model.parameters():  # unfreeze everything for fine-tuning
    p.requires_grad_(True)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    x = torch.randn(2, 6, 8)
    opt.zero_grad()
    loss = model(x).pow(2).mean()
    loss.backward()
    opt.step()
print("loss", round(loss.item(), 4))
print("qkv weight", round(model.qkv.weight.norm().item(), 4))
print("freqs", round(model.rotary.freqs.norm().item(), 4))
