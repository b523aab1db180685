"""The library's trainer module calls torch.set_grad_enabled(False) at import time (re-enabling grad only inside its own train loop), which silently turns autograd off for every other piece of torch code in the process, so the user's own model built after the import cannot backpropagate.

source: https://github.com/scverse/scvi-tools/issues/214
symptom: error
rule: ?
shape: library module with a global grad-mode side effect (Trainer.train re-enables grad, posterior/metric helpers rely on it being off) followed by the user's own downstream classifier trained on the library's latent output
"""
import torch
from torch import nn
import torch.nn.functional as F

torch.manual_seed(0)

# ---- scvi/inference/trainer.py (module level, runs on import) ----
torch.set_grad_enabled(False)  # bench: bug


class VAE(nn.Module):
    def __init__(self, n_genes=10, n_latent=3):
        super().__init__()
        self.enc = nn.Linear(n_genes, 2 * n_latent)
        self.dec = nn.Linear(n_latent, n_genes)

    def forward(self, x):
        mu, logvar = self.enc(x).chunk(2, -1)
        z = mu + torch.randn_like(mu) * (0.5 * logvar).exp()
        kl = -0.5 * (1 + logvar - mu.pow(2) - logvar.exp()).sum(-1).mean()
        return F.mse_loss(self.dec(z), x) + 1e-2 * kl


class Posterior:
    def __init__(self, model, data):
        self.model, self.data = model, data

    def get_latent(self):
        mu, _ = self.model.enc(self.data).chunk(2, -1)
        return mu

    def elbo(self):
        return self.model(self.data).item()


class Trainer:
    def __init__(self, model, data):
        self.model, self.data = model, data
        self.train_set = Posterior(model, data)

    def train(self, n_epochs=5, lr=1e-2):
        with torch.set_grad_enabled(True):  # bench: bug
            self.model.train()
            params = filter(lambda p: p.requires_grad, self.model.parameters())
            optimizer = torch.optim.Adam(params, lr=lr)
            for _ in range(n_epochs):
                optimizer.zero_grad()
                loss = self.model(self.data)
                loss.backward()
                optimizer.step()
                self.compute_metrics()

    def compute_metrics(self):
        self.history = self.train_set.elbo()


# ---- user code ----
counts = torch.rand(32, 10)
labels = (counts[:, 0] > 0.5).long()
vae = VAE()
trainer = Trainer(vae, counts)
trainer.train()
latent = trainer.train_set.get_latent()

clf = nn.Linear(3, 2)
opt = torch.optim.SGD(clf.parameters(), lr=0.5)
for step in range(3):
    opt.zero_grad()
    loss = F.cross_entropy(clf(latent), labels)
    loss.backward()
    opt.step()
print("clf loss", round(loss.item(), 4))
print("clf grad", None if clf.weight.grad is None else round(clf.weight.grad.norm().item(), 4))
print("vae elbo", round(trainer.history, 4))
