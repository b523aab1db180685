"""ScaledDotProductAttention fills masked scores with -np.inf; an utterance whose encoder length is 0 leaves a fully masked row, softmax gives 0/0 = nan and the nan spreads to the loss and every gradient of the speech Transformer.

source: https://github.com/sooftware/kospeech/issues/37
symptom: nan-grad
rule: ?
shape: speech Transformer attention (MultiHeadAttention nn.Module with query/key/value projections and a ScaledDotProductAttention submodule) with an encoder padding mask, CE loss, one backward
wrong: other
why: keeps -inf and zeroes the nan attention rows with torch.nan_to_num after the softmax; the run is finite, but the empty utterance's queries now get a zero context where the -1e9 fill gives a uniform average, so the loss and the value-projection gradient differ
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class ScaledDotProductAttention(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.sqrt_dim = np.sqrt(dim)

    def forward(self, query, key, value, mask=None):
        score = torch.bmm(query, key.transpose(1, 2)) / self.sqrt_dim
        if mask is not None:
            score.masked_fill_(mask, -np.inf)
        attn = F.softmax(score, -1)
        attn = torch.nan_to_num(attn)
        return torch.bmm(attn, value), attn


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model=16, num_heads=2):
        super().__init__()
        self.d_head = d_model // num_heads
        self.num_heads = num_heads
        self.query_proj = nn.Linear(d_model, d_model)
        self.key_proj = nn.Linear(d_model, d_model)
        self.value_proj = nn.Linear(d_model, d_model)
        self.scaled_dot_attn = ScaledDotProductAttention(self.d_head)

    def forward(self, query, key, value, mask=None):
        b = value.size(0)
        q = self.query_proj(query).view(b, -1, self.num_heads, self.d_head).permute(2, 0, 1, 3).reshape(b * self.num_heads, -1, self.d_head)
        k = self.key_proj(key).view(b, -1, self.num_heads, self.d_head).permute(2, 0, 1, 3).reshape(b * self.num_heads, -1, self.d_head)
        v = self.value_proj(value).view(b, -1, self.num_heads, self.d_head).permute(2, 0, 1, 3).reshape(b * self.num_heads, -1, self.d_head)
        if mask is not None:
            mask = mask.repeat(self.num_heads, 1, 1)
        context, attn = self.scaled_dot_attn(q, k, v, mask)
        context = context.view(self.num_heads, b, -1, self.d_head).permute(1, 2, 0, 3).reshape(b, -1, self.num_heads * self.d_head)
        return context, attn


def get_attn_pad_mask(enc_lengths, q_len, k_len):
    keys = torch.arange(k_len).unsqueeze(0) >= enc_lengths.unsqueeze(1)
    return keys.unsqueeze(1).expand(-1, q_len, -1)


d_model, vocab = 16, 10
enc_out = torch.randn(3, 6, d_model)
enc_lengths = torch.tensor([6, 4, 0])  # the last utterance is shorter than the conv subsampling: 0 frames
dec_in = torch.randn(3, 5, d_model)
attn_layer = MultiHeadAttention(d_model)
fc = nn.Linear(d_model, vocab)
context, _ = attn_layer(dec_in, enc_out, enc_out, get_attn_pad_mask(enc_lengths, 5, 6))
targets = torch.randint(0, vocab, (3, 5))
loss = F.cross_entropy(fc(context + dec_in).reshape(-1, vocab), targets.reshape(-1))
loss.backward()
print("loss", round(loss.item(), 4))
print("query grad", round(attn_layer.query_proj.weight.grad.norm().item(), 4))
print("value grad", round(attn_layer.value_proj.weight.grad.norm().item(), 4))
