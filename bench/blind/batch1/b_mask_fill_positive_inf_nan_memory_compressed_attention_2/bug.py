"""The causal and padding masks are filled with -float('-inf'), which is +inf, so masked scores win the softmax and the attention turns into nan.

source: https://github.com/lucidrains/memory-compressed-attention/issues/2
symptom: nan-grad
rule: ?
shape: nn.Module (memory-compressed causal self-attention: conv-compressed keys/values, null key, in-place masked_fill_ on the scores) trained for a few Adam steps
"""
import torch
from torch import nn
import torch.nn.functional as F

torch.manual_seed(0)


class ConvCompress(nn.Module):
    def __init__(self, dim, ratio=3, groups=1):
        super().__init__()
        self.conv = nn.Conv1d(dim, dim, ratio, stride=ratio, groups=groups)

    def forward(self, mem):
        mem = mem.transpose(1, 2)
        compressed_mem = self.conv(mem)
        return compressed_mem.transpose(1, 2)


class MemoryCompressedAttention(nn.Module):
    def __init__(self, dim, heads=8, causal=False, compression_factor=3, dropout=0.):
        super().__init__()
        assert (dim % heads) == 0, 'dimension must be divisible by number of heads'
        self.heads = heads
        self.causal = causal
        self.compression_factor = compression_factor
        self.compress_fn = ConvCompress(dim, compression_factor, groups=heads)
        self.to_qkv = nn.Linear(dim, dim * 3, bias=False)
        self.to_out = nn.Linear(dim, dim)
        self.dropout = nn.Dropout(dropout)
        self.null_k = nn.Parameter(torch.zeros(1, 1, dim))
        self.null_v = nn.Parameter(torch.zeros(1, 1, dim))

    def forward(self, x, input_mask=None):
        b, t, d, h, cf, device = *x.shape, self.heads, self.compression_factor, x.device
        q, k, v = self.to_qkv(x).chunk(3, dim=-1)

        padding = cf - (t % cf)
        if padding < cf:
            k, v = map(lambda t: F.pad(t, (0, 0, padding, 0)), (k, v))

        k, v = map(self.compress_fn, (k, v))

        # attach a null key and value, in the case that the first query has no keys to pay attention to
        k = torch.cat((self.null_k.expand(b, -1, -1), k), dim=1)
        v = torch.cat((self.null_v.expand(b, -1, -1), v), dim=1)

        q, k, v = map(lambda t: t.reshape(*t.shape[:2], h, -1).transpose(1, 2), (q, k, v))

        dots = torch.einsum('bhid,bhjd->bhij', q, k) * d ** -0.5

        # causal masking, if needed
        if self.causal:
            mask_q = mask_k = torch.arange(t, device=device)
            if padding < cf:
                mask_k = F.pad(mask_k, (padding, 0))
            mask_k, _ = mask_k.reshape(-1, cf).max(dim=-1)
            mask = mask_q[:, None] < mask_k[None, :]
            mask = F.pad(mask, (1, 0), value=False)
            dots.masked_fill_(mask[None, None, ...], -float('-inf'))  # bench: bug
            del mask

        # input masking
        if input_mask is not None:
            mask_q = mask_k = input_mask
            if padding < cf:
                mask_k = F.pad(mask_k, (padding, 0), value=True)
            mask_k = mask_k.reshape(b, -1, cf).sum(dim=-1) > 0
            mask = mask_q[:, None, :, None] < mask_k[:, None, None, :]
            mask = F.pad(mask, (1, 0), value=True)
            dots.masked_fill_(~mask, -float('-inf'))  # bench: bug
            del mask

        attn = dots.softmax(dim=-1)
        attn = self.dropout(attn)
        out = torch.einsum('bhij,bhjd->bhid', attn, v)
        out = out.transpose(1, 2).reshape(b, t, d)
        return self.to_out(out)


attn = MemoryCompressedAttention(dim=16, heads=4, causal=True, compression_factor=3)
optimizer = torch.optim.Adam(attn.parameters(), lr=1e-3)
x = torch.randn(2, 10, 16)
input_mask = torch.ones(2, 10, dtype=torch.bool)
input_mask[1, 7:] = False
target = torch.randn(2, 10, 16)

for step in range(3):
    optimizer.zero_grad()
    out = attn(x, input_mask=input_mask)
    loss = F.mse_loss(out, target)
    loss.backward()
    grad_norm = torch.cat([p.grad.flatten() for p in attn.parameters()]).norm()
    optimizer.step()

print("loss", round(loss.item(), 4))
print("grad norm", round(grad_norm.item(), 4))
print("to_qkv grad norm", round(attn.to_qkv.weight.grad.norm().item(), 4))
