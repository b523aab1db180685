"""The discriminator loss is backpropagated every iteration but optimizer_d.step() is never called, so the discriminator never changes and the generator is trained against a fixed random critic.

source: https://github.com/zhaoyuzhi/deepfillv2/issues/6
symptom: no-training
rule: ?
shape: inpainting GAN trainer loop: coarse-to-fine generator nn.Module and patch discriminator nn.Module, hinge D loss on detached completions, generator L1 + GAN loss, two Adam optimizers, several iterations
wrong: other
why: stepping optimizer_d at the end of the iteration, after the generator's loss.backward(), updates D with its own loss gradients plus the generator-loss gradients that also landed on D's parameters, so the discriminator is pushed partly toward helping the generator.
"""
import torch
import torch.nn as nn

torch.manual_seed(0)


class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        self.coarse = nn.Sequential(nn.Conv2d(4, 8, 3, padding=1), nn.ELU(), nn.Conv2d(8, 3, 3, padding=1))
        self.refine = nn.Sequential(nn.Conv2d(4, 8, 3, padding=1), nn.ELU(), nn.Conv2d(8, 3, 3, padding=1))

    def forward(self, img, mask):
        first_out = self.coarse(torch.cat([img * (1 - mask), mask], 1))
        first_in = img * (1 - mask) + first_out * mask
        second_out = self.refine(torch.cat([first_in, mask], 1))
        return first_out, second_out


class PatchDiscriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(4, 8, 4, stride=2, padding=1), nn.LeakyReLU(0.2), nn.Conv2d(8, 1, 4, stride=2, padding=1))

    def forward(self, img, mask):
        return self.net(torch.cat([img, mask], 1))


generator, discriminator = Generator(), PatchDiscriminator()
optimizer_g = torch.optim.Adam(generator.parameters(), lr=1e-3, betas=(0.5, 0.999))
optimizer_d = torch.optim.Adam(discriminator.parameters(), lr=1e-3, betas=(0.5, 0.999))
lambda_l1, lambda_gan = 10.0, 1.0
d_init = [p.detach().clone() for p in discriminator.parameters()]

for batch_idx in range(5):
    img = torch.rand(2, 3, 16, 16)
    mask = torch.zeros(2, 1, 16, 16)
    mask[:, :, 4:12, 4:12] = 1.0

    optimizer_d.zero_grad()
    first_out, second_out = generator(img, mask)
    second_out_wholeimg = img * (1 - mask) + second_out * mask
    fake_scalar = discriminator(second_out_wholeimg.detach(), mask)
    true_scalar = discriminator(img, mask)
    loss_fake = -torch.mean(torch.min(torch.zeros_like(fake_scalar), -1 - fake_scalar))
    loss_true = -torch.mean(torch.min(torch.zeros_like(true_scalar), -1 + true_scalar))
    loss_D = 0.5 * (loss_fake + loss_true)
    loss_D.backward()

    optimizer_g.zero_grad()
    first_L1Loss = (first_out - img).abs().mean()
    second_L1Loss = (second_out - img).abs().mean()
    fake_scalar = discriminator(second_out_wholeimg, mask)
    GAN_Loss = -torch.mean(fake_scalar)
    loss = lambda_l1 * first_L1Loss + lambda_l1 * second_L1Loss + lambda_gan * GAN_Loss
    loss.backward()
    optimizer_g.step()
    optimizer_d.step()

d_change = sum((p.detach() - p0).abs().sum() for p, p0 in zip(discriminator.parameters(), d_init))
print("loss_D", round(loss_D.item(), 4))
print("loss_G", round(loss.item(), 4))
print("D weight change", round(d_change.item(), 4))
