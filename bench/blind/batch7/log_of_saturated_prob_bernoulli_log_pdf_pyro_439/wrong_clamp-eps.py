"""The Bernoulli log-density computes x*log(p) + (1-x)*log(1-p) on raw probabilities, so a decoder whose sigmoid saturates to exactly 0 or 1 gives 0*log(0) = nan in the ELBO and nan gradients.

source: https://github.com/pyro-ppl/pyro/pull/439
symptom: nan-grad
rule: ?
shape: library distribution (Bernoulli batch_log_pdf) as the likelihood of a small VAE (encoder/decoder nn.Modules), one ELBO backward
wrong: clamp-eps
why: clamps the log terms at -100 like BCELoss; the ELBO becomes finite, but log's backward still divides by the exact 0 probability, so the gradients stay nan
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class Bernoulli:
    def __init__(self, ps):
        self.ps = ps

    def batch_log_pdf(self, x):
        return (x * torch.log(self.ps).clamp(min=-100) + (1 - x) * torch.log(1 - self.ps).clamp(min=-100)).sum(-1)


class VAE(nn.Module):
    def __init__(self, d=12, z=3):
        super().__init__()
        self.enc = nn.Linear(d, 2 * z)
        self.dec = nn.Sequential(nn.Linear(z, 16), nn.Tanh(), nn.Linear(16, d))

    def forward(self, x):
        mu, logvar = self.enc(x).chunk(2, -1)
        zs = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)
        ps = torch.sigmoid(self.dec(zs))
        rec = Bernoulli(ps).batch_log_pdf(x)
        kl = -0.5 * (1 + logvar - mu**2 - logvar.exp()).sum(-1)
        return (kl - rec).mean()


model = VAE()
with torch.no_grad():
    model.dec[2].weight.mul_(40.0)  # a confident decoder: some pixels saturate to exactly 0 or 1
x = (torch.rand(8, 12) > 0.5).float()
loss = model(x)
loss.backward()
print("loss", round(loss.item(), 4))
print("dec grad", round(model.dec[2].weight.grad.norm().item(), 4))
print("enc grad", round(model.enc.weight.grad.norm().item(), 4))
