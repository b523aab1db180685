"""The WGAN-GP gradient penalty takes gradients.norm(2, dim=1) of a [batch, 1, H, W] gradient, i.e. a per-pixel norm over the single channel, instead of one norm per sample.

source: https://github.com/Zeleni9/pytorch-wgan/issues/40
symptom: silent
rule: ?
shape: WGAN-GP trainer class with a calculate_gradient_penalty method (autograd.grad with create_graph) used in the critic step
"""
import torch
import torch.nn as nn

torch.manual_seed(0)


class WGAN_GP:
    def __init__(self):
        self.G = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Unflatten(1, (1, 4, 4)))
        self.D = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.LeakyReLU(0.2), nn.Flatten(), nn.Linear(64, 1))
        self.d_optimizer = torch.optim.Adam(self.D.parameters(), lr=1e-4, betas=(0.5, 0.999))
        self.lambda_term = 10
        self.batch_size = 4

    def calculate_gradient_penalty(self, real_images, fake_images):
        eta = torch.rand(self.batch_size, 1, 1, 1).expand_as(real_images)
        interpolated = (eta * real_images + (1 - eta) * fake_images).requires_grad_(True)
        prob_interpolated = self.D(interpolated)
        gradients = torch.autograd.grad(outputs=prob_interpolated, inputs=interpolated,
                                        grad_outputs=torch.ones_like(prob_interpolated),
                                        create_graph=True, retain_graph=True)[0]
        gradients = gradients.view(gradients.size(0), -1)
        grad_penalty = ((gradients.norm(2, dim=1) - 1) ** 2).mean() * self.lambda_term
        return grad_penalty

    def critic_step(self, images):
        self.D.zero_grad()
        d_loss_real = self.D(images).mean()
        z = torch.randn(self.batch_size, 4)
        fake_images = self.G(z).detach()
        d_loss_fake = self.D(fake_images).mean()
        gradient_penalty = self.calculate_gradient_penalty(images, fake_images)
        d_loss = d_loss_fake - d_loss_real + gradient_penalty
        d_loss.backward()
        self.d_optimizer.step()
        return d_loss, gradient_penalty


gan = WGAN_GP()
for it in range(3):
    d_loss, gp = gan.critic_step(torch.randn(4, 1, 4, 4))

g = torch.sqrt(sum((p.grad ** 2).sum() for p in gan.D.parameters()))
print("d_loss", round(d_loss.item(), 4))
print("gradient_penalty", round(gp.item(), 4))
print("grad_norm_D", round(g.item(), 4))
