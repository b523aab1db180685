"""The VQ-VAE quantizer puts the commitment cost on the codebook term (z_q - z_e.detach()) instead of the commitment term (z_q.detach() - z_e); the loss value is identical but the encoder and the codebook get the wrong gradient weights.

source: https://github.com/karpathy/deep-vector-quantization/issues/2
symptom: silent
rule: ?
shape: VQ-VAE nn.Module: encoder, VQVAEQuantize submodule (projection, nn.Embedding codebook, nearest-code lookup, straight-through estimator, latent loss), decoder; reconstruction + latent loss step
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class VQVAEQuantize(nn.Module):
    def __init__(self, num_hiddens, n_embed, embedding_dim):
        super().__init__()
        self.embedding_dim = embedding_dim
        self.n_embed = n_embed
        self.kld_scale = 10.0
        self.proj = nn.Conv2d(num_hiddens, embedding_dim, 1)
        self.embed = nn.Embedding(n_embed, embedding_dim)

    def embed_code(self, embed_id):
        return F.embedding(embed_id, self.embed.weight)

    def forward(self, z):
        B, C, H, W = z.size()
        z_e = self.proj(z).permute(0, 2, 3, 1)
        flatten = z_e.reshape(-1, self.embedding_dim)
        dist = (flatten.pow(2).sum(1, keepdim=True) - 2 * flatten @ self.embed.weight.t()
                + self.embed.weight.pow(2).sum(1, keepdim=True).t())
        _, ind = (-dist).max(1)
        z_q = self.embed_code(ind.view(B, H, W))
        commitment_cost = 0.25
        diff = commitment_cost * (z_q - z_e.detach()).pow(2).mean() + (z_q.detach() - z_e).pow(2).mean()  # bench: bug
        diff = diff * self.kld_scale
        z_q = z_e + (z_q - z_e).detach()  # straight-through
        return z_q.permute(0, 3, 1, 2), diff, ind


class VQVAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU())
        self.quantizer = VQVAEQuantize(8, 6, 4)
        self.decoder = nn.Conv2d(4, 1, 3, padding=1)

    def forward(self, x):
        z_q, latent_loss, ind = self.quantizer(self.encoder(x))
        return self.decoder(z_q), latent_loss


model = VQVAE()
x = torch.randn(2, 1, 5, 5)
x_hat, latent_loss = model(x)
recon_loss = F.mse_loss(x_hat, x)
loss = recon_loss + latent_loss
loss.backward()
print("loss", round(loss.item(), 4))
print("encoder_grad", round(model.encoder[0].weight.grad.norm().item(), 4))
print("codebook_grad", round(model.quantizer.embed.weight.grad.norm().item(), 4))
