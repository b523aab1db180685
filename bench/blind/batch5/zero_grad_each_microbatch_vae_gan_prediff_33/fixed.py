"""The VAE-GAN module's manual-optimization training step calls zero_grad() before every backward and does not divide the losses, so with gradient accumulation each optimizer step only uses the last micro-batch's gradient.

source: https://github.com/gaozhihan/PreDiff/pull/33
symptom: silent
rule: ?
shape: LightningModule-style class with manual optimization: VAE (encoder/decoder, posterior) + patch discriminator, two optimizers, gradient accumulation over micro-batches
"""
import torch
from torch import nn
import torch.nn.functional as F

torch.manual_seed(0)


class VAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(16, 8)
        self.dec = nn.Linear(4, 16)

    def forward(self, x):
        mean, logvar = self.enc(x).chunk(2, dim=-1)
        z = mean + torch.randn_like(mean) * (0.5 * logvar).exp()
        return self.dec(z), mean, logvar


class VAEGANLoss(nn.Module):
    def __init__(self, kl_weight=1e-3):
        super().__init__()
        self.disc = nn.Sequential(nn.Linear(16, 8), nn.LeakyReLU(0.2), nn.Linear(8, 1))
        self.kl_weight = kl_weight

    def forward(self, target, pred, mean, logvar, optimizer_idx):
        if optimizer_idx == 0:
            rec = F.l1_loss(pred, target)
            kl = -0.5 * (1 + logvar - mean.pow(2) - logvar.exp()).mean()
            g_loss = -self.disc(pred).mean()
            return rec + self.kl_weight * kl + 0.1 * g_loss
        logits_real = self.disc(target.detach())
        logits_fake = self.disc(pred.detach())
        return 0.5 * (F.relu(1.0 - logits_real).mean() + F.relu(1.0 + logits_fake).mean())


class VAEModule:
    def __init__(self, accumulate_grad_batches=4):
        self.vae, self.loss = VAE(), VAEGANLoss()
        self.accumulate_grad_batches = accumulate_grad_batches
        self.g_opt = torch.optim.SGD(self.vae.parameters(), lr=0.1)
        self.d_opt = torch.optim.SGD(self.loss.disc.parameters(), lr=0.1)

    def training_step(self, batch, batch_idx):
        pred, mean, logvar = self.vae(batch)
        self.loss.disc.requires_grad_(False)  # like toggle_optimizer(g_opt)
        aeloss = self.loss(batch, pred, mean, logvar, optimizer_idx=0)
        aeloss /= self.accumulate_grad_batches
        aeloss.backward()
        if (batch_idx + 1) % self.accumulate_grad_batches == 0:
            torch.nn.utils.clip_grad_norm_(self.vae.parameters(), 10.0)
            self.g_opt.step()
            self.g_opt.zero_grad()
        self.loss.disc.requires_grad_(True)

        discloss = self.loss(batch, pred, mean, logvar, optimizer_idx=1)
        discloss /= self.accumulate_grad_batches
        discloss.backward()
        if (batch_idx + 1) % self.accumulate_grad_batches == 0:
            torch.nn.utils.clip_grad_norm_(self.loss.disc.parameters(), 10.0)
            self.d_opt.step()
            self.d_opt.zero_grad()
        return aeloss.detach(), discloss.detach()


module = VAEModule()
data = torch.randn(8, 6, 16)
for batch_idx in range(8):
    aeloss, discloss = module.training_step(data[batch_idx], batch_idx)
print("aeloss", round(aeloss.item(), 4), "discloss", round(discloss.item(), 4))
print("enc weight norm", round(module.vae.enc.weight.norm().item(), 4))
print("disc weight norm", round(module.loss.disc[0].weight.norm().item(), 4))
