"""The Extractor wrapper stores the ViT's patch embeddings from a forward hook with output.clone().detach(), so CoCa's contrastive loss never reaches the image encoder and its .grad stays None.

source: https://github.com/lucidrains/CoCa-pytorch/issues/6
symptom: none-grad
rule: ?
shape: library helper (forward-hook Extractor around a ViT nn.Module) feeding a CoCa-style contrastive model with attention pooling
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class ViT(nn.Module):
    def __init__(self, dim=16, patch=4):
        super().__init__()
        self.patch = patch
        self.to_patch = nn.Linear(patch * patch, dim)
        self.transformer = nn.TransformerEncoderLayer(dim, 2, 32, dropout=0.0, batch_first=True)
        self.head = nn.Linear(dim, 10)

    def forward(self, img):
        p = self.patch
        x = img.unfold(1, p, p).unfold(2, p, p).reshape(img.shape[0], -1, p * p)
        x = self.transformer(self.to_patch(x))
        return self.head(x.mean(1))


class Extractor(nn.Module):
    def __init__(self, vit):
        super().__init__()
        self.vit = vit
        self.latents = None
        vit.transformer.register_forward_hook(self._hook)

    def _hook(self, module, inputs, output):
        self.latents = output.clone()

    def forward(self, img):
        self.vit(img)
        return self.latents


class CoCa(nn.Module):
    def __init__(self, image_encoder, dim=16, vocab=30):
        super().__init__()
        self.img_encoder = image_encoder
        self.img_query = nn.Parameter(torch.randn(1, 1, dim))
        self.img_attn_pool = nn.MultiheadAttention(dim, 2, batch_first=True)
        self.token_emb = nn.Embedding(vocab, dim)
        self.text_proj = nn.Linear(dim, dim)

    def forward(self, text, img):
        tokens = self.img_encoder(img)
        q = self.img_query.expand(img.shape[0], -1, -1)
        img_emb = self.img_attn_pool(q, tokens, tokens)[0].squeeze(1)
        txt_emb = self.text_proj(self.token_emb(text).mean(1))
        sim = F.normalize(txt_emb, dim=-1) @ F.normalize(img_emb, dim=-1).t() / 0.1
        labels = torch.arange(img.shape[0])
        return (F.cross_entropy(sim, labels) + F.cross_entropy(sim.t(), labels)) / 2


vit = ViT()
coca = CoCa(Extractor(vit))
text = torch.randint(0, 30, (4, 6))
images = torch.randn(4, 8, 8)
loss = coca(text, images)
loss.backward()
print("loss", round(loss.item(), 4))
g = vit.to_patch.weight.grad
print("vit grad", None if g is None else round(g.norm().item(), 4))
print("pool grad", round(coca.img_attn_pool.in_proj_weight.grad.norm().item(), 4))
