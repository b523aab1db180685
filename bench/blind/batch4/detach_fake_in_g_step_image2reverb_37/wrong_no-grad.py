"""In the generator step the fake spectrogram is detached before the discriminator scores it, so the adversarial term G_loss1 sends no gradient to the generator and only the L1 term trains it.

source: https://github.com/nikhilsinghmus/image2reverb/issues/37
symptom: silent
rule: ?
shape: GAN module (Lightning-style training_step with optimizer_idx) holding encoder, generator and conditional discriminator submodules; generator step = LSGAN loss on D(fake) + L1 to the real spectrogram
wrong: no-grad
why: scoring the fake under torch.no_grad() (to keep D out of the generator update) cuts the same path as the detach: G_loss1 still sends no gradient to the generator.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 16))

    def forward(self, z):
        return self.net(z)


class Discriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16 + 4, 32), nn.LeakyReLU(0.2), nn.Linear(32, 1))

    def forward(self, spec, f):
        return self.net(torch.cat([spec, f], dim=1))


class Image2Reverb(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(12, 8)
        self.g = Generator()
        self.d = Discriminator()
        self._opt_weight = 10.0

    def forward(self, x):
        f = self.enc(x)
        return self.g(f), f[:, :4]

    def training_step(self, batch, optimizer_idx):
        x, spec = batch
        fake_spec, f = self(x)
        if optimizer_idx == 0:
            with torch.no_grad():
                d_fake2 = self.d(fake_spec, f)
            G_loss1 = F.mse_loss(d_fake2, torch.ones(d_fake2.shape))
            G_loss2 = F.l1_loss(fake_spec, spec)
            return G_loss1 + self._opt_weight * G_loss2
        d_real = self.d(spec, f.detach())
        d_fake = self.d(fake_spec.detach(), f.detach())
        return 0.5 * (F.mse_loss(d_real, torch.ones(d_real.shape)) + F.mse_loss(d_fake, torch.zeros(d_fake.shape)))


model = Image2Reverb()
g_opt = torch.optim.Adam(list(model.enc.parameters()) + list(model.g.parameters()), lr=1e-3)
d_opt = torch.optim.Adam(model.d.parameters(), lr=1e-3)
batch = (torch.randn(8, 12), torch.randn(8, 16))
for step in range(3):
    for idx, opt in ((0, g_opt), (1, d_opt)):
        opt.zero_grad()
        loss = model.training_step(batch, idx)
        loss.backward()
        if idx == 0:
            g_grad = model.g.net[0].weight.grad.norm().item()
        opt.step()
print("G loss", round(model.training_step(batch, 0).item(), 4))
print("G grad", round(g_grad, 4))
print("D loss", round(model.training_step(batch, 1).item(), 4))
