"""Generator loss uses pred_fake = netd(fake).detach(): the adversarial term sends no gradient to the generator

source: https://github.com/wangle53/CSA-CDGAN/issues/5
symptom: no-training
rule: none
shape: GAN training step: netg/netd modules, generator total = weighted content loss + adversarial loss
wrong: dropped-term
why: drops the adversarial term from the generator loss instead of un-detaching it, so the generator trains on the reconstruction loss alone
"""
import torch
import torch.nn as nn

torch.manual_seed(0)
netg = nn.Sequential(nn.Linear(6, 6), nn.Sigmoid())
netd = nn.Sequential(nn.Linear(6, 1), nn.Sigmoid())
l_con = nn.L1Loss()
l_bce = nn.BCELoss()
G_WEIGHT, D_WEIGHT = 1.0, 10.0

x = torch.randn(4, 6)
gt = torch.rand(4, 6)
real_label = torch.ones(size=(4,), dtype=torch.float32)

fake = netg(x)
pred_fake = netd(fake)
err_d_fake = l_bce(pred_fake.view(-1), real_label)
err_g = l_con(fake, gt)
err_g_total = G_WEIGHT * err_g

netg.zero_grad()
err_g_total.backward()
print("adversarial term reaches the generator:", err_d_fake.requires_grad)
print("generator grad norm:", round(netg[0].weight.grad.norm().item(), 4))
