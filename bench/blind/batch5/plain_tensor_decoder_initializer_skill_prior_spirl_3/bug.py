"""The skill-prior model's FixedTrainableInitializer stores its learned initial LSTM state as a plain tensor with requires_grad=True instead of an nn.Parameter, so it is not in model.parameters(), the optimizer never sees it and it stays at zero forever.

source: https://github.com/clvrai/spirl/pull/3
symptom: no-training
rule: ?
shape: skill-prior VAE (LSTM inference net, decoder whose hidden state comes from a trainable initializer submodule built in a factory method), Adam over model.parameters(), a few steps
"""
import torch
from torch import nn

torch.manual_seed(0)


class SkillPriorMdl(nn.Module):
    def __init__(self, action_dim=3, nz_enc=16, nz_vae=4, n_rollout_steps=5):
        super().__init__()
        self.action_dim, self.nz_vae, self.steps = action_dim, nz_vae, n_rollout_steps
        self.q_lstm = nn.LSTM(action_dim, nz_enc, batch_first=True)
        self.q_out = nn.Linear(nz_enc, nz_vae * 2)
        self.decoder = nn.LSTMCell(nz_vae, nz_enc)
        self.dec_out = nn.Linear(nz_enc, action_dim)
        self.decoder_initializer = self._build_decoder_initializer(nz_enc)

    def _build_decoder_initializer(self, size):
        class FixedTrainableInitializer(nn.Module):
            def __init__(self):
                super().__init__()
                self.val = torch.zeros((1, size), requires_grad=True)  # bench: bug

            def forward(self, state):
                return self.val.repeat(state.shape[0], 1)

        return FixedTrainableInitializer()

    def forward(self, actions):
        _, (h, _) = self.q_lstm(actions)
        mu, log_sigma = self.q_out(h[-1]).chunk(2, dim=-1)
        z = mu + torch.randn_like(mu) * log_sigma.exp()
        hx = self.decoder_initializer(actions)
        cx = torch.zeros_like(hx)
        outs = []
        for _ in range(self.steps):
            hx, cx = self.decoder(z, (hx, cx))
            outs.append(self.dec_out(hx))
        kl = 0.5 * (mu.pow(2) + (2 * log_sigma).exp() - 2 * log_sigma - 1).sum(-1).mean()
        return torch.stack(outs, 1), kl


model = SkillPriorMdl()
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
actions = torch.randn(8, 5, 3)
for step in range(5):
    opt.zero_grad()
    rec, kl = model(actions)
    loss = (rec - actions).pow(2).mean() + 1e-2 * kl
    loss.backward()
    opt.step()
print("loss", round(loss.item(), 4))
print("initializer val norm", round(model.decoder_initializer.val.norm().item(), 4))
print("n params", sum(p.numel() for p in model.parameters()))
