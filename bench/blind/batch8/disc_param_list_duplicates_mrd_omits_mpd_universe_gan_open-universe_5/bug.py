"""The discriminator optimizer is built from `list(self.loss_mrd.parameters()) + list(self.loss_mrd.parameters())`, so the multi-resolution discriminator is listed twice and the multi-period discriminator (loss_mpd) is never optimized.

source: https://github.com/line/open-universe/issues/5
symptom: no-training
rule: ?
shape: GAN speech-enhancement model class (score/generator network + two discriminator loss modules MPD and MRD), configure_optimizers returning generator and discriminator AdamW optimizers, manual training_step with discriminator step (grad clipping per discriminator) then generator step, several steps
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class Disc(nn.Module):
    def __init__(self, k):
        super().__init__()
        self.net = nn.Sequential(nn.Conv1d(1, 4, k, padding=k // 2), nn.LeakyReLU(0.1), nn.Conv1d(4, 1, 3, padding=1))

    def forward(self, real, fake):
        return self.net(real), self.net(fake)


class UniverseGAN(nn.Module):
    def __init__(self):
        super().__init__()
        self.score_model = nn.Sequential(nn.Conv1d(1, 8, 5, padding=2), nn.Tanh(), nn.Conv1d(8, 1, 5, padding=2))
        self.loss_mpd = Disc(3)
        self.loss_mrd = Disc(7)

    def configure_optimizers(self):
        optimizer_gen = torch.optim.AdamW(self.score_model.parameters(), lr=2e-3)
        # optimizer discriminator
        params_disc = list(self.loss_mrd.parameters()) + list(  # bench: bug
            self.loss_mrd.parameters()  # bench: bug
        )  # bench: bug
        optimizer_disc = torch.optim.AdamW(params_disc, lr=2e-3)
        return [optimizer_gen, optimizer_disc]

    def training_step(self, mix, target, opt_score, opt_disc):
        y_est = self.score_model(mix)

        # Discriminator optimization
        opt_disc.zero_grad()
        r_f, g_f = self.loss_mpd(target, y_est.detach())
        r_s, g_s = self.loss_mrd(target, y_est.detach())
        loss_disc_f = ((r_f - 1) ** 2).mean() + (g_f ** 2).mean()
        loss_disc_s = ((r_s - 1) ** 2).mean() + (g_s ** 2).mean()
        loss_disc = loss_disc_f + loss_disc_s
        loss_disc.backward()
        torch.nn.utils.clip_grad_norm_(self.loss_mpd.parameters(), 10.0)
        torch.nn.utils.clip_grad_norm_(self.loss_mrd.parameters(), 10.0)
        opt_disc.step()

        # Generator optimization
        opt_score.zero_grad()
        _, g_f = self.loss_mpd(target, y_est)
        _, g_s = self.loss_mrd(target, y_est)
        loss_gen = F.l1_loss(y_est, target) + ((g_f - 1) ** 2).mean() + ((g_s - 1) ** 2).mean()
        loss_gen.backward()
        opt_score.step()
        return loss_disc_f, loss_disc_s, loss_gen


model = UniverseGAN()
opt_score, opt_disc = model.configure_optimizers()
mpd_init = [p.detach().clone() for p in model.loss_mpd.parameters()]
target = torch.sin(torch.linspace(0, 12, 64)).view(1, 1, 64).repeat(4, 1, 1)
mix = target + 0.5 * torch.randn(4, 1, 64)

for step in range(6):
    loss_disc_f, loss_disc_s, loss_gen = model.training_step(mix, target, opt_score, opt_disc)

mpd_change = sum((p.detach() - p0).abs().sum() for p, p0 in zip(model.loss_mpd.parameters(), mpd_init))
print("loss_mpd", round(loss_disc_f.item(), 4))
print("loss_mrd", round(loss_disc_s.item(), 4))
print("loss_gen", round(loss_gen.item(), 4))
print("mpd weight change", round(mpd_change.item(), 4))
