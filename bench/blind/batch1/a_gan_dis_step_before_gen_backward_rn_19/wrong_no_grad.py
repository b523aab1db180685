"""Discriminator optimizer.step() runs before g_loss.backward(), whose graph still goes through the discriminator weights the step just changed in place.

source: https://github.com/geekyutao/RN/pull/19
symptom: error
rule: ?
shape: GAN training loop, D and G losses built first, then D backward/step, then G backward through the stepped D
wrong: no-grad
why: running the discriminator on the fake under torch.no_grad() removes the error but also the adversarial gradient, so the generator trains on the L1 term alone.
"""
import torch
import torch.nn as nn

torch.manual_seed(0)


class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Conv2d(4, 8, 3, padding=1), nn.ReLU())
        self.decoder = nn.Sequential(nn.Conv2d(8, 3, 3, padding=1), nn.Tanh())

    def forward(self, gt, mask):
        x = torch.cat([gt * (1 - mask), mask], dim=1)
        return self.decoder(self.encoder(x))


class Discriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Sequential(nn.Conv2d(3, 8, 4, 2, 1), nn.LeakyReLU(0.2))
        self.conv2 = nn.Conv2d(8, 1, 4, 1, 1)

    def forward(self, x):
        feat = self.conv1(x)
        return torch.sigmoid(self.conv2(feat)), [feat]


class AdversarialLoss(nn.Module):
    def __init__(self):
        super().__init__()
        self.criterion = nn.BCELoss()

    def forward(self, outputs, is_real, is_disc=None):
        labels = torch.ones_like(outputs) if is_real else torch.zeros_like(outputs)
        return self.criterion(outputs, labels)


class InpaintingModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.generator = Generator()
        self.discriminator = Discriminator()
        self.adversarial_loss = AdversarialLoss()
        self.l1_loss = nn.L1Loss()
        self.gan_weight, self.l1_weight = 0.1, 1.0
        self.gen_optimizer = torch.optim.Adam(self.generator.parameters(), lr=1e-3)
        self.dis_optimizer = torch.optim.Adam(self.discriminator.parameters(), lr=1e-3)


model = InpaintingModel()
training_data_loader = [
    (torch.rand(2, 3, 16, 16) * 2 - 1, (torch.rand(2, 1, 16, 16) > 0.7).float(), None) for _ in range(3)
]


def train():
    for batch in training_data_loader:
        gt, mask, index = batch
        prediction = model.generator(gt, mask)
        merged_result = prediction * mask + gt * (1 - mask)

        g_loss, d_loss = 0, 0

        d_real, _ = model.discriminator(gt)
        d_fake, _ = model.discriminator(prediction.detach())
        d_real_loss = model.adversarial_loss(d_real, True, True)
        d_fake_loss = model.adversarial_loss(d_fake, False, True)
        d_loss += (d_real_loss + d_fake_loss) / 2

        with torch.no_grad():
            g_fake, _ = model.discriminator(prediction)
        g_gan_loss = model.adversarial_loss(g_fake, True, False)
        g_loss += model.gan_weight * g_gan_loss
        g_l1_loss = model.l1_loss(gt, merged_result) / torch.mean(mask)
        g_loss += model.l1_weight * g_l1_loss

        d_loss.backward()
        model.dis_optimizer.step()
        model.dis_optimizer.zero_grad()

        g_loss.backward()
        gnorm = sum(p.grad.norm() ** 2 for p in model.generator.parameters()) ** 0.5
        model.gen_optimizer.step()
        model.gen_optimizer.zero_grad()
    return d_loss, g_loss, gnorm


d_loss, g_loss, gnorm = train()
print("d_loss", round(d_loss.item(), 4))
print("g_loss", round(g_loss.item(), 4))
print("G grad norm", round(gnorm.item(), 4))
print("D weight norm", round(model.discriminator.conv2.weight.norm().item(), 4))
