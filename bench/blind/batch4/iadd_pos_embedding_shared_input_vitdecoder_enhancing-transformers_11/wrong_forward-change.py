"""ViTDecoder adds its positional embedding to the incoming token tensor in place, so when two decoders read the same quantized tokens the second one overwrites the input the first one's LayerNorm saved for backward.

source: https://github.com/thuanz123/enhancing-transformers/issues/11
symptom: error
rule: ?
shape: ViT-VQGAN style model: encoder + vector quantizer (straight-through) whose output feeds two ViTDecoder modules (pos-embedding add, pre-norm transformer block, to_pixel head); sum of both reconstruction losses
wrong: forward-change
why: cloning the tokens only for the second decoder avoids the error, but decoder_a still adds its embedding into the shared tensor first, so decoder_b decodes quant + pos_a + pos_b and both the reconstruction and the gradients differ.
"""
import torch
import torch.nn as nn

torch.manual_seed(0)


class PreNormFF(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.ff = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x):
        return x + self.ff(self.norm(x))


class ViTDecoder(nn.Module):
    def __init__(self, num_tokens=6, dim=8, out_dim=12):
        super().__init__()
        self.de_pos_embedding = nn.Parameter(torch.randn(1, num_tokens, dim) * 0.1, requires_grad=False)
        self.transformer = nn.Sequential(PreNormFF(dim), PreNormFF(dim))
        self.to_pixel = nn.Linear(dim, out_dim)

    def forward(self, token):
        x = token
        x += self.de_pos_embedding
        x = self.transformer(x)
        return self.to_pixel(x)


class Quantizer(nn.Module):
    def __init__(self, n_embed=10, dim=8):
        super().__init__()
        self.embedding = nn.Embedding(n_embed, dim)

    def forward(self, z):
        d = torch.cdist(z.reshape(-1, z.shape[-1]), self.embedding.weight)
        z_q = self.embedding(d.argmin(1)).view_as(z)
        loss = ((z_q - z.detach()) ** 2).mean() + 0.25 * ((z_q.detach() - z) ** 2).mean()
        return z + (z_q - z).detach(), loss


encoder = nn.Linear(12, 8)
quantizer = Quantizer()
decoder_a, decoder_b = ViTDecoder(), ViTDecoder()
img_a, img_b = torch.randn(2, 6, 12), torch.randn(2, 6, 12)
quant, q_loss = quantizer(encoder(img_a))
rec_a = decoder_a(quant)
rec_b = decoder_b(quant.clone())
loss = ((rec_a - img_a) ** 2).mean() + ((rec_b - img_b) ** 2).mean() + q_loss
loss.backward()
print("loss", round(loss.item(), 4))
print("encoder grad", round(encoder.weight.grad.norm().item(), 4))
print("decoder_a grad", round(decoder_a.to_pixel.weight.grad.norm().item(), 4))
