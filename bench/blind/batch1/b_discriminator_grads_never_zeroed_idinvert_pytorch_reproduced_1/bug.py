"""optimizer_D.zero_grad() is never called, so the discriminator's gradients accumulate over iterations, including the adversarial gradients left in D by the encoder's backward.

source: https://github.com/Hsintien-Ng/idinvert_pytorch-reproduced/issues/1
symptom: silent
rule: ?
shape: GAN-inversion training loop: encoder E + frozen generator G, discriminator D with gradient-divergence penalty (autograd.grad create_graph), alternating D and E Adam steps
"""
import torch
import torch.nn as nn
import torch.nn.functional as Fn
from torch import autograd

torch.manual_seed(0)


class StyleGANEncoder(nn.Module):
    def __init__(self, num_layers=2, w_dim=8):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), nn.LeakyReLU(0.2), nn.Flatten(), nn.Linear(8 * 8 * 8, num_layers * w_dim))


class Synthesis(nn.Module):
    def __init__(self, num_layers=2, w_dim=8):
        super().__init__()
        self.fc = nn.Linear(num_layers * w_dim, 3 * 16 * 16)

    def forward(self, z):
        return torch.tanh(self.fc(z.flatten(1))).view(-1, 3, 16, 16)


class StyleGANGenerator(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Module()
        self.net.synthesis = Synthesis()
        self.num_layers, self.w_space_dim = 2, 8


class StyleGANDiscriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(3, 8, 4, 2, 1), nn.LeakyReLU(0.2), nn.Flatten(), nn.Linear(8 * 8 * 8, 1))


def GAN_loss(scores_out, real=True):
    if real:
        return torch.mean(Fn.softplus(-scores_out))
    else:
        return torch.mean(Fn.softplus(scores_out))


def div_loss_(D, real_x, fake_x, p=6):
    x_ = real_x.requires_grad_(True)
    y_ = D.net(x_)
    grad = autograd.grad(outputs=y_, inputs=x_, grad_outputs=torch.ones_like(y_),
                         create_graph=True, retain_graph=True, only_inputs=True)[0]
    grad = grad.view(x_.shape[0], -1)
    return (grad.norm(2, dim=1) ** p).mean()


loss_pix_weight, loss_adv_weight = 1.0, 0.1
loss_real_weight, loss_fake_weight, loss_gp_weight, loss_ep_weight = 1.0, 1.0, 5.0, 0.001

G = StyleGANGenerator()
E = StyleGANEncoder()
D = StyleGANDiscriminator()
G.net.synthesis.eval()
G.net.synthesis.requires_grad_(False)
encode_dim = [G.num_layers, G.w_space_dim]

optimizer_E = torch.optim.Adam(E.net.parameters(), lr=1e-3)
optimizer_D = torch.optim.Adam(D.net.parameters(), lr=1e-3)
train_dataloader = [torch.rand(4, 3, 16, 16) * 2 - 1 for _ in range(4)]

for step, items in enumerate(train_dataloader):
    x = items
    batch_size = x.shape[0]
    z = E.net(x).view(batch_size, *encode_dim)
    x_rec = G.net.synthesis(z)

    # optimizing D
    x_real = D.net(x)
    x_fake = D.net(x_rec.detach())
    loss_real = GAN_loss(x_real, real=True)
    loss_fake = GAN_loss(x_fake, real=False)
    loss_gp = div_loss_(D, x, x_rec.detach())
    D_loss = loss_real_weight * loss_real + loss_fake_weight * loss_fake + loss_gp_weight * loss_gp + loss_ep_weight * (loss_real * loss_real)  # bench: bug
    D_loss.backward()  # bench: bug
    d_grad = torch.cat([p.grad.flatten() for p in D.net.parameters()]).norm()
    optimizer_D.step()

    # optimizing G (the encoder)
    loss_pix = torch.mean((x - x_rec) ** 2)
    x_adv = D.net(x_rec)
    loss_adv = GAN_loss(x_adv, real=True)
    E_loss = loss_pix_weight * loss_pix + loss_adv_weight * loss_adv
    optimizer_E.zero_grad()
    E_loss.backward()
    e_grad = torch.cat([p.grad.flatten() for p in E.net.parameters()]).norm()
    optimizer_E.step()

print("D loss", round(D_loss.item(), 4))
print("E loss", round(E_loss.item(), 4))
print("D grad norm", round(d_grad.item(), 4))
print("E grad norm", round(e_grad.item(), 4))
