"""GAN.step never zeroes the discriminator's gradients, so each D update also applies the previous steps' D gradients, including those left by the generator's errG.backward().

source: https://github.com/Adversarial-Deep-Learning/code-soup/issues/69
symptom: silent
rule: ?
shape: GAN wrapper class holding Generator and Discriminator modules that each own their optimizer; step() = D real/fake backward + D step, then G zero_grad + errG backward + G step; three steps
"""
import torch
import torch.nn as nn
import torch.optim as optim

torch.manual_seed(0)


class Generator(nn.Module):
    def __init__(self, image_size, channels, latent_dims, lr):
        super().__init__()
        self.image_size, self.channels = image_size, channels
        self.main = nn.Sequential(nn.Linear(latent_dims, 32), nn.LeakyReLU(0.2), nn.Linear(32, image_size * image_size * channels), nn.Tanh())
        self.optimizer = optim.Adam(self.parameters(), lr=lr)

    def forward(self, x):
        return self.main(x).view(-1, self.channels, self.image_size, self.image_size)


class Discriminator(nn.Module):
    def __init__(self, image_size, channels, lr):
        super().__init__()
        self.n = image_size * image_size * channels
        self.main = nn.Sequential(nn.Linear(self.n, 32), nn.LeakyReLU(0.2), nn.Linear(32, 1), nn.Sigmoid())
        self.optimizer = optim.SGD(self.parameters(), lr=lr)

    def forward(self, x):
        return self.main(x.view(-1, self.n))


class GAN:
    def __init__(self, image_size, channels, latent_dims, lr):
        self.latent_dims = latent_dims
        self.generator = Generator(image_size, channels, latent_dims, lr)
        self.discriminator = Discriminator(image_size, channels, lr)
        self.criterion = nn.BCELoss()
        self.real_label, self.fake_label = 1.0, 0.0

    def step(self, real_image):
        self.discriminator.zero_grad()
        batch_size = real_image.shape[0]
        label = torch.full((batch_size,), self.real_label)
        output = self.discriminator(real_image).view(-1)
        errD_real = self.criterion(output, label)
        errD_real.backward()
        noise = torch.randn(batch_size, self.latent_dims)
        fake = self.generator(noise)
        label.fill_(self.fake_label)
        output = self.discriminator(fake.detach()).view(-1)
        errD_fake = self.criterion(output, label)
        errD_fake.backward()
        errD = errD_real + errD_fake
        self.d_grad = self.discriminator.main[0].weight.grad.norm().item()
        self.discriminator.optimizer.step()

        self.generator.zero_grad()
        label.fill_(self.real_label)
        output = self.discriminator(fake).view(-1)
        errG = self.criterion(output, label)
        errG.backward()
        self.generator.optimizer.step()
        return errD, errG


gan = GAN(image_size=4, channels=1, latent_dims=8, lr=0.05)
real = torch.rand(16, 1, 4, 4) * 2 - 1
for _ in range(3):
    errD, errG = gan.step(real)
print("errD", round(errD.item(), 4))
print("errG", round(errG.item(), 4))
print("D grad at last update", round(gan.d_grad, 4))
