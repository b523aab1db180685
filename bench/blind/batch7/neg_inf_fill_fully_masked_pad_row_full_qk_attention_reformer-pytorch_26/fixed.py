"""FullQKAttention fills masked logits with float('-inf'); a padded query position has every key masked, its softmax row is 0/0 = nan, and although the loss ignores padded positions the nan flows back into every gradient.

source: https://github.com/lucidrains/reformer-pytorch/pull/26
symptom: nan-grad
rule: ?
shape: shared-QK attention nn.Module (toqk/tov/to_out Linear submodules) with a padding input_mask, masked token loss, one backward
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
TOKEN_SELF_ATTN_VALUE = -5e4


def max_neg_value(tensor):
    return -torch.finfo(tensor.dtype).max


class FullQKAttention(nn.Module):
    def forward(self, qk, v, input_mask=None):
        b, t, dim = qk.shape
        q = qk
        k = F.normalize(qk, 2, dim=-1)
        dot = torch.einsum("bie,bje->bij", q, k) * (dim**-0.5)
        i = torch.arange(t)
        dot[:, i, i] = TOKEN_SELF_ATTN_VALUE
        masked_value = max_neg_value(dot)
        if input_mask is not None:
            mask = input_mask[:, :, None] * input_mask[:, None, :]
            dot.masked_fill_(~mask, masked_value)
        dot = dot.softmax(dim=-1)
        return torch.einsum("bij,bje->bie", dot, v)


class SelfAttention(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.toqk = nn.Linear(dim, dim, bias=False)
        self.tov = nn.Linear(dim, dim, bias=False)
        self.to_out = nn.Linear(dim, dim)
        self.attn = FullQKAttention()

    def forward(self, x, input_mask=None):
        return self.to_out(self.attn(self.toqk(x), self.tov(x), input_mask))


vocab, dim = 20, 16
emb = nn.Embedding(vocab, dim)
layer = SelfAttention(dim)
head = nn.Linear(dim, vocab)
tokens = torch.randint(1, vocab, (2, 6))
input_mask = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])
logits = head(layer(emb(tokens), input_mask))
targets = torch.randint(0, vocab, (2, 6))
loss = F.cross_entropy(logits[input_mask], targets[input_mask])
loss.backward()
print("loss", round(loss.item(), 4))
print("toqk grad", round(layer.toqk.weight.grad.norm().item(), 4))
print("emb grad", round(emb.weight.grad.norm().item(), 4))
