"""With several generator updates per discriminator step, the discriminator step reuses the fake batch produced in the last generator iteration; that generator graph was already freed by g_loss.backward(), so d_loss.backward() fails.

source: https://pytroubles.com/ru/posts/id2658-gan-v-pytorch-ispravljaem-oshibku-backward-cherez-detach
symptom: error
rule: ?
shape: flat MNIST-style GAN loop (flattened 784 inputs stand-in: 64), BCE loss, Adam for G and D, n generator updates per discriminator step, several batches
wrong: detach
why: detaching the fake batch where it is generated removes the error, but then g_loss no longer reaches the generator: G gets no gradient, never changes, and only the discriminator trains.
"""
import torch
import torch.nn as nn

torch.manual_seed(0)

latent_dim, img_dim = 8, 64
netG = nn.Sequential(nn.Linear(latent_dim, 32), nn.ReLU(), nn.Linear(32, img_dim), nn.Tanh())
netD = nn.Sequential(nn.Linear(img_dim, 32), nn.LeakyReLU(0.2), nn.Linear(32, 1), nn.Sigmoid())
optG = torch.optim.Adam(netG.parameters(), lr=2e-4)
optD = torch.optim.Adam(netD.parameters(), lr=2e-4)
bce_loss = nn.BCELoss()
g_update_factor = 3
data_stream = [torch.rand(16, img_dim) * 2 - 1 for _ in range(3)]

for batch_id, real_batch in enumerate(data_stream):
    bsz = real_batch.shape[0]

    # Generator updates (n times)
    for _ in range(g_update_factor):
        z = torch.randn(bsz, latent_dim)
        fake_batch = netG(z).detach()
        gen_scores = netD(fake_batch).view(-1)
        g_loss = bce_loss(gen_scores, torch.ones_like(gen_scores))
        g_loss.backward()
        optG.step()
        netG.zero_grad()

    # Discriminator update
    real_scores = netD(real_batch).view(-1)
    fake_scores = netD(fake_batch).view(-1)
    d_loss = bce_loss(real_scores, torch.ones_like(real_scores)) + bce_loss(fake_scores, torch.zeros_like(fake_scores))
    d_loss.backward()
    optD.step()
    netD.zero_grad()

print("g_loss", round(g_loss.item(), 4))
print("d_loss", round(d_loss.item(), 4))
print("G weight norm", round(netG[0].weight.norm().item(), 4))
print("D weight norm", round(netD[0].weight.norm().item(), 4))
