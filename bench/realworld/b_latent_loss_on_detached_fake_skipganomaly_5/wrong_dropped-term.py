"""Generator's latent (feature-matching) loss is computed from netd(self.fake.detach()): err_g_lat adds nothing to the generator's gradient

source: https://github.com/samet-akcay/skip-ganomaly/issues/5
symptom: no-training
rule: none
shape: model class with forward_g / forward_d / backward_g methods, discriminator returning (pred, features)
wrong: dropped-term
why: drops the latent loss from the generator objective instead of recomputing it on the non-detached fake, so the adversarial feature-matching term never trains the generator
"""
import torch
import torch.nn as nn


class NetD(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Linear(6, 4), nn.LeakyReLU(0.2))
        self.classifier = nn.Sequential(nn.Linear(4, 1), nn.Sigmoid())

    def forward(self, x):
        features = self.features(x)
        return self.classifier(features).view(-1), features


class Skipganomaly:
    def __init__(self):
        self.netg = nn.Sequential(nn.Linear(6, 6), nn.Tanh())
        self.netd = NetD()
        self.l_con = nn.L1Loss()
        self.l_lat = nn.MSELoss()
        self.w_con, self.w_lat = 50.0, 1.0

    def forward_g(self):
        self.fake = self.netg(self.input)

    def forward_d(self):
        self.pred_real, self.feat_real = self.netd(self.input)
        self.pred_fake, self.feat_fake = self.netd(self.fake.detach())

    def backward_g(self):
        self.err_g_con = self.l_con(self.fake, self.input)
        self.err_g_lat = self.l_lat(self.feat_fake, self.feat_real)
        self.err_g = self.err_g_con * self.w_con  # the latent term has no gradient to the generator anyway
        self.err_g.backward(retain_graph=True)


torch.manual_seed(0)
model = Skipganomaly()
model.input = torch.randn(8, 6)
model.forward_g()
model.forward_d()
model.netg.zero_grad()
model.backward_g()
lat_grad = torch.autograd.grad(model.err_g_lat, model.fake, allow_unused=True)[0]
print("latent loss reaches the generator:", lat_grad is not None)
print("generator grad norm:", round(model.netg[0].weight.grad.norm().item(), 4))
