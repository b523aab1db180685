"""The generator loop reuses the `fake` built before the loop, so after the first optimizerG.step() the next errG.backward() walks a graph whose generator weights were changed in place.

source: https://github.com/tamarott/SinGAN/issues/148
symptom: error
rule: ?
shape: GAN training loop (SinGAN train_single_scale), D steps then G steps, G steps reuse one generated sample
wrong: other
why: stepping once after the G loop keeps the stale fake but, since netG.zero_grad() runs every iteration, the single step uses only the last gradient: one generator update per epoch instead of three.
"""
import torch
import torch.nn as nn

torch.manual_seed(0)

netG = nn.Sequential(nn.Linear(8, 16), nn.LeakyReLU(0.2), nn.Linear(16, 8))
netD = nn.Sequential(nn.Linear(8, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1))
optimizerD = torch.optim.Adam(netD.parameters(), lr=5e-4, betas=(0.5, 0.999))
optimizerG = torch.optim.Adam(netG.parameters(), lr=5e-4, betas=(0.5, 0.999))
real = torch.randn(4, 8)
z_opt = torch.randn(4, 8)
alpha = 10.0
Dsteps, Gsteps = 2, 3

for epoch in range(3):
    noise = torch.randn(4, 8)
    # (1) update D
    for j in range(Dsteps):
        netD.zero_grad()
        errD_real = -netD(real).mean()
        errD_real.backward(retain_graph=True)
        fake = netG(noise.detach())
        errD_fake = netD(fake.detach()).mean()
        errD_fake.backward(retain_graph=True)
        optimizerD.step()
    # (2) update G
    for j in range(Gsteps):
        netG.zero_grad()
        output = netD(fake)
        errG = -output.mean()
        errG.backward(retain_graph=True)
        rec_loss = alpha * nn.functional.mse_loss(netG(z_opt.detach()), real)
        rec_loss.backward(retain_graph=True)
    optimizerG.step()

gG = torch.sqrt(sum((p.grad ** 2).sum() for p in netG.parameters()))
gD = torch.sqrt(sum((p.grad ** 2).sum() for p in netD.parameters()))
print("errG", round(errG.item(), 4))
print("rec_loss", round(rec_loss.item(), 4))
print("grad_norm_G", round(gG.item(), 4))
print("grad_norm_D", round(gD.item(), 4))
