"""In the discriminator half of the training step the code calls `scaler.step(g_optimizer)` instead of `scaler.step(d_optimizer)`, so the discriminator is never updated and the generator takes a second step with its stale gradients.

source: https://github.com/Lornatang/SRGAN-PyTorch/issues/85
symptom: no-training
rule: ?
shape: SRGAN train() function: generator and discriminator nn.Modules, pixel + adversarial losses, discriminator requires_grad toggling, GradScaler, separate Adam optimizers for G and D, several steps
"""
import torch
import torch.nn as nn

torch.manual_seed(0)


class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.PReLU(), nn.Upsample(scale_factor=2), nn.Conv2d(8, 3, 3, padding=1))

    def forward(self, x):
        return self.net(x)


class Discriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.LeakyReLU(0.2), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 1))

    def forward(self, x):
        return self.net(x)


g_model, d_model = Generator(), Discriminator()
pixel_criterion = nn.MSELoss()
adversarial_criterion = nn.BCEWithLogitsLoss()
g_optimizer = torch.optim.Adam(g_model.parameters(), 1e-3, (0.9, 0.999))
d_optimizer = torch.optim.Adam(d_model.parameters(), 1e-3, (0.9, 0.999))
scaler = torch.amp.GradScaler('cpu')
pixel_weight, adversarial_weight = 1.0, 0.001

batch_size = 4
real_label = torch.full([batch_size, 1], 1.0)
fake_label = torch.full([batch_size, 1], 0.0)
gt_batches = [torch.rand(batch_size, 3, 16, 16) for _ in range(5)]
d_init = [p.detach().clone() for p in d_model.parameters()]

for gt in gt_batches:
    lr = nn.functional.avg_pool2d(gt, 2)

    # start training the generator model
    for d_parameters in d_model.parameters():
        d_parameters.requires_grad = False
    g_model.zero_grad(set_to_none=True)
    sr = g_model(lr)
    pixel_loss = pixel_weight * pixel_criterion(sr, gt)
    adversarial_loss = adversarial_weight * adversarial_criterion(d_model(sr), real_label)
    g_loss = pixel_loss + adversarial_loss
    scaler.scale(g_loss).backward()
    scaler.step(g_optimizer)
    scaler.update()

    # start training the discriminator model
    for d_parameters in d_model.parameters():
        d_parameters.requires_grad = True
    d_model.zero_grad(set_to_none=True)
    gt_output = d_model(gt)
    d_loss_gt = adversarial_criterion(gt_output, real_label)
    scaler.scale(d_loss_gt).backward()
    sr_output = d_model(sr.detach().clone())
    d_loss_sr = adversarial_criterion(sr_output, fake_label)
    scaler.scale(d_loss_sr).backward()
    d_loss = d_loss_gt + d_loss_sr
    # Update discriminator model weights
    scaler.step(g_optimizer)  # bench: bug
    scaler.update()

d_change = sum((p.detach() - p0).abs().sum() for p, p0 in zip(d_model.parameters(), d_init))
print("g_loss", round(g_loss.item(), 4))
print("d_loss", round(d_loss.item(), 4))
print("D weight change", round(d_change.item(), 4))
print("G weight norm", round(g_model.net[0].weight.norm().item(), 4))
