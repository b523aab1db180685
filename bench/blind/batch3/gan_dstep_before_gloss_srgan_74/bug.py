"""The generator loss reuses `fake_out`, computed by the discriminator before optimizerD.step() changed its weights in place, so g_loss.backward() fails.

source: https://github.com/leftthomas/SRGAN/issues/74
symptom: error
rule: ?
shape: SRGAN training loop, D update then G update with a GeneratorLoss module that takes the discriminator output
"""
import torch
import torch.nn as nn

torch.manual_seed(0)


class GeneratorLoss(nn.Module):
    def __init__(self):
        super().__init__()
        self.mse_loss = nn.MSELoss()

    def forward(self, out_labels, out_images, target_images):
        adversarial_loss = torch.mean(1 - out_labels)
        image_loss = self.mse_loss(out_images, target_images)
        return image_loss + 0.001 * adversarial_loss


netG = nn.Sequential(nn.Linear(6, 16), nn.PReLU(), nn.Linear(16, 12))
netD = nn.Sequential(nn.Linear(12, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1), nn.Sigmoid())
generator_criterion = GeneratorLoss()
optimizerG = torch.optim.Adam(netG.parameters())
optimizerD = torch.optim.Adam(netD.parameters())

for step in range(3):
    z = torch.randn(4, 6)
    real_img = torch.randn(4, 12)
    fake_img = netG(z)

    # (1) Update D network: maximize D(x)-1-D(G(z))
    netD.zero_grad()
    real_out = netD(real_img).mean()
    fake_out = netD(fake_img).mean()
    d_loss = 1 - real_out + fake_out
    d_loss.backward(retain_graph=True)
    optimizerD.step()

    # (2) Update G network
    netG.zero_grad()
    g_loss = generator_criterion(fake_out, fake_img, real_img)  # bench: bug
    g_loss.backward()
    optimizerG.step()

gG = torch.sqrt(sum((p.grad ** 2).sum() for p in netG.parameters()))
gD = torch.sqrt(sum((p.grad ** 2).sum() for p in netD.parameters()))
print("d_loss", round(d_loss.item(), 4))
print("g_loss", round(g_loss.item(), 4))
print("grad_norm_G", round(gG.item(), 6))
print("grad_norm_D", round(gD.item(), 6))
