"""The wav2vec2 pretraining model detaches the quantized targets, so the contrastive loss never reaches the quantizer's codebook entries.

source: https://github.com/facebookresearch/fairseq2/pull/731
symptom: none-grad
rule: ?
shape: wav2vec2-style model (feature encoder, context transformer, Gumbel vector quantizer) with contrastive + diversity loss
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class GumbelVectorQuantizer(nn.Module):
    def __init__(self, dim, num_codes, out_dim):
        super().__init__()
        self.logits_proj = nn.Linear(dim, num_codes)
        self.entries = nn.Parameter(torch.randn(num_codes, out_dim))

    def forward(self, x, tau=2.0):
        logits = self.logits_proj(x)
        probs = F.gumbel_softmax(logits, tau=tau, hard=True)
        avg = logits.softmax(-1).mean(dim=(0, 1))
        diversity = (avg * (avg + 1e-7).log()).sum()
        return probs @ self.entries, diversity


class Wav2Vec2Model(nn.Module):
    def __init__(self, dim=16, num_codes=8):
        super().__init__()
        self.feature_encoder = nn.Linear(10, dim)
        self.context = nn.TransformerEncoderLayer(dim, 2, 32, dropout=0.0, batch_first=True)
        self.quantizer = GumbelVectorQuantizer(dim, num_codes, dim)
        self.final_proj = nn.Linear(dim, dim)

    def forward(self, wav, mask):
        feats = self.feature_encoder(wav)
        q, diversity = self.quantizer(feats)
        targets = q.detach()  # bench: bug
        ctx_in = feats.masked_fill(mask.unsqueeze(-1), 0.0)
        c = self.final_proj(self.context(ctx_in))
        logits = F.cosine_similarity(c.unsqueeze(2), targets.unsqueeze(1), dim=-1) / 0.1
        labels = torch.arange(wav.size(1)).expand(wav.size(0), -1)
        contrastive = F.cross_entropy(logits.flatten(0, 1), labels.flatten())
        return contrastive + 0.1 * diversity


model = Wav2Vec2Model()
wav = torch.randn(2, 6, 10)
mask = torch.rand(2, 6) < 0.5
loss = model(wav, mask)
loss.backward()
g = model.quantizer.entries.grad
print("loss", round(loss.item(), 4))
print("codebook grad", None if g is None else round(g.norm().item(), 4))
print("encoder grad", round(model.feature_encoder.weight.grad.norm().item(), 4))
