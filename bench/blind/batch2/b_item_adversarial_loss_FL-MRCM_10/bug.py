"""The federated reconstruction update turns the adversarial feature-alignment loss into a Python float with `.detach().item()` before adding it to the L1 loss, so the alignment term is in the logged loss but sends no gradient to the reconstruction network.

source: https://github.com/guopengf/FL-MRCM/issues/10 (fix commits 7769f40 and 0a36f17)
symptom: silent
rule: ?
shape: federated local-update class (train method with a discriminator step on detached latents, then a reconstruction step with an adversarial domain loss), encoder-decoder nn.Module returning (output, latent), two Adam optimizers
"""

import time
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
from torch.autograd import Variable

torch.manual_seed(0)
np.random.seed(0)


class ReconNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1), nn.ReLU())
        self.dec = nn.Conv2d(8, 1, 3, padding=1)

    def forward(self, x):
        z = self.enc(x)
        return self.dec(z) + x, z


class FeatureDiscriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(8, 8, 3, stride=2, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 2))

    def forward(self, z):
        return self.net(z)


class LocalUpdate_ad_da(object):
    def __init__(self, args, batches_src, batches_tgt, optimizer, optimizer_fd, flag=False):
        self.args = args
        self.loss_func = nn.L1Loss()
        self.adv_loss = nn.BCEWithLogitsLoss()
        self.ldr_train = batches_src
        self.target_domain = batches_tgt
        self.optimizer = optimizer
        self.optimizer_fd = optimizer_fd
        self.flag = flag

    def set_requires_grad(self, nets, requires_grad=False):
        if not isinstance(nets, list):
            nets = [nets]
        for net in nets:
            if net is not None:
                for param in net.parameters():
                    param.requires_grad = requires_grad

    def train(self, net, net_fd):
        net.train()
        net_fd.train()
        optimizer = self.optimizer
        optimizer_fd = self.optimizer_fd
        batch_loss, batch_loss_adv_g = [], []
        for iter in range(self.args.local_ep):
            iter_data_time = time.time()
            for batch_idx, (batch, batch_t) in enumerate(zip(self.ldr_train, self.target_domain)):
                input, target = batch
                input_t, target_t = batch_t
                net.zero_grad()
                net_fd.zero_grad()
                output, z = net(input)
                output_t, z_t = net(input_t)

                src_domain_code = np.repeat(np.array([[*([1]), *([0])]]), input.shape[0], axis=0)
                tgt_domain_code = np.repeat(np.array([[*([0]), *([1])]]), input_t.shape[0], axis=0)
                src_domain_code = Variable(torch.FloatTensor(src_domain_code), requires_grad=False)
                tgt_domain_code = Variable(torch.FloatTensor(tgt_domain_code), requires_grad=False)

                # update DF for source site
                if not self.flag:
                    self.set_requires_grad(net_fd, True)
                    src_domain_pred = net_fd(z.detach())
                    tgt_domain_pred = net_fd(z_t.detach())
                    df_loss_src = self.adv_loss(src_domain_pred, 1 - src_domain_code)
                    df_loss_tgt = self.adv_loss(tgt_domain_pred, 1 - tgt_domain_code)
                    df_loss = (df_loss_src + df_loss_tgt) / 2
                    df_loss.backward()
                    optimizer_fd.step()

                # update Recon
                self.set_requires_grad(net_fd, False)
                loss_adv_g = 0
                if not self.flag:
                    src_domain_pred = net_fd(z)
                    tgt_domain_pred = net_fd(z_t)
                    df_loss_src = self.adv_loss(src_domain_pred, src_domain_code)
                    df_loss_tgt = self.adv_loss(tgt_domain_pred, tgt_domain_code)
                    loss_adv_g = (df_loss_src + df_loss_tgt) / 2
                    loss_adv_g = loss_adv_g.detach().item()  # bench: bug
                batch_loss_adv_g.append(loss_adv_g)  # bench: bug

                L1_loss = self.loss_func(output, target)
                loss = L1_loss + loss_adv_g if not self.flag else L1_loss
                batch_loss.append(loss.detach().item())
                loss.backward()
                optimizer.step()
        return sum(batch_loss) / len(batch_loss), sum(batch_loss_adv_g) / len(batch_loss_adv_g)


def make_batches(n, shift):
    out = []
    for _ in range(n):
        target = torch.rand(4, 1, 8, 8)
        out.append((target + 0.2 * torch.randn_like(target) + shift, target))
    return out


net, net_fd = ReconNet(), FeatureDiscriminator()
optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)
optimizer_fd = torch.optim.Adam(net_fd.parameters(), lr=1e-3)
local = LocalUpdate_ad_da(SimpleNamespace(local_ep=1), make_batches(2, 0.0), make_batches(2, 0.5), optimizer, optimizer_fd)
loss, loss_adv_g = local.train(net, net_fd)

print("loss", round(loss, 4))
print("adv_g", round(loss_adv_g, 4))
print("encoder grad norm", round(net.enc[0].weight.grad.norm().item(), 4))
print("latent conv grad norm", round(net.enc[2].weight.grad.norm().item(), 4))
