"""MaskedCrossAttention calls the out-of-place attn.masked_fill(...) and discards the result, so text tokens with no preceding media still attend to the media and the loss and gradients include attention that should be zero.

source: https://github.com/lucidrains/flamingo-pytorch/issues/10
symptom: silent
rule: ?
shape: Flamingo gated cross-attention block: MaskedCrossAttention module (q from text, k/v from media latents, media-location mask, zeroing of attention for text before the first media) inside GatedCrossAttentionBlock with a tanh gate; LM-style loss
"""
import torch
import torch.nn as nn

torch.manual_seed(0)


class MaskedCrossAttention(nn.Module):
    def __init__(self, dim=8, dim_head=4, heads=2, only_attend_immediate_media=True):
        super().__init__()
        self.scale, self.heads = dim_head ** -0.5, heads
        self.norm = nn.LayerNorm(dim)
        self.to_q = nn.Linear(dim, dim_head * heads, bias=False)
        self.to_kv = nn.Linear(dim, dim_head * heads * 2, bias=False)
        self.to_out = nn.Linear(dim_head * heads, dim, bias=False)
        self.only_attend_immediate_media = only_attend_immediate_media

    def forward(self, x, media, media_locations):
        b, t, m, _ = media.shape
        h = self.heads
        x = self.norm(x)
        q = self.to_q(x).view(b, -1, h, 4).transpose(1, 2) * self.scale
        k, v = self.to_kv(media.reshape(b, t * m, -1)).chunk(2, dim=-1)
        k, v = (z.view(b, t * m, h, 4).transpose(1, 2) for z in (k, v))
        sim = q @ k.transpose(-1, -2)
        text_time = media_locations.cumsum(dim=-1)
        media_time = torch.arange(t) + 1
        text_to_media_mask = text_time[:, None, :, None] == media_time.repeat_interleave(m)[None, None, None, :]
        sim = sim.masked_fill(~text_to_media_mask, -torch.finfo(sim.dtype).max)
        sim = sim - sim.amax(dim=-1, keepdim=True).detach()
        attn = sim.softmax(dim=-1)
        if self.only_attend_immediate_media:
            text_without_media_mask = (text_time == 0)[:, None, :, None]
            attn = attn.masked_fill(text_without_media_mask, 0.0)
        out = (attn @ v).transpose(1, 2).reshape(b, -1, h * 4)
        return self.to_out(out)


class GatedCrossAttentionBlock(nn.Module):
    def __init__(self, dim=8):
        super().__init__()
        self.attn = MaskedCrossAttention(dim)
        self.attn_gate = nn.Parameter(torch.tensor([0.5]))

    def forward(self, x, media, media_locations):
        return self.attn(x, media, media_locations) * self.attn_gate.tanh() + x


block = GatedCrossAttentionBlock()
head = nn.Linear(8, 10)
text = torch.randn(2, 6, 8)
media = torch.randn(2, 2, 3, 8)  # 2 images, 3 latents each
media_locations = torch.tensor([[0, 0, 1, 0, 1, 0], [0, 1, 0, 0, 0, 1]]).bool()
targets = torch.randint(0, 10, (2, 6))
logits = head(block(text, media, media_locations))
loss = nn.functional.cross_entropy(logits.reshape(-1, 10), targets.reshape(-1))
loss.backward()
print("loss", round(loss.item(), 4))
print("to_kv grad", round(block.attn.to_kv.weight.grad.norm().item(), 4))
print("gate grad", round(block.attn_gate.grad.item(), 4))
