"""The training loop accumulates gradients over grad_accum_steps micro-batches but backpropagates each micro-batch's mean loss unscaled, so the accumulated gradient is grad_accum_steps times the gradient of the batch mean.

source: https://github.com/ApolloResearch/e2e_sae/pull/70
symptom: silent
rule: ?
shape: sparse autoencoder module (encoder/decoder) trained with a loss module (reconstruction MSE mean + L1 sparsity mean); gradient-accumulation loop with clip_grad_norm_ and Adam
"""
import torch
import torch.nn as nn

torch.manual_seed(0)


class SAE(nn.Module):
    def __init__(self, d=8, n=32):
        super().__init__()
        self.encoder = nn.Linear(d, n)
        self.decoder = nn.Linear(n, d)

    def forward(self, x):
        c = torch.relu(self.encoder(x))
        return self.decoder(c), c


class SAELoss(nn.Module):
    def __init__(self, sparsity_coeff=0.05):
        super().__init__()
        self.sparsity_coeff = sparsity_coeff

    def forward(self, x, x_hat, c):
        return ((x_hat - x) ** 2).mean() + self.sparsity_coeff * c.abs().sum(-1).mean()


sae, loss_fn = SAE(), SAELoss()
opt = torch.optim.Adam(sae.parameters(), lr=1e-2)
grad_accum_steps = 4
data = torch.randn(3 * grad_accum_steps, 16, 8)
for batch_idx, x in enumerate(data):
    x_hat, c = sae(x)
    loss = loss_fn(x, x_hat, c)
    loss.backward()  # bench: bug
    if (batch_idx + 1) % grad_accum_steps == 0:
        grad_norm = torch.nn.utils.clip_grad_norm_(sae.parameters(), max_norm=1.0)
        opt.step()
        opt.zero_grad()
x_hat, c = sae(data[0])
print("loss", round(loss_fn(data[0], x_hat, c).item(), 4))
print("last grad norm", round(grad_norm.item(), 4))
