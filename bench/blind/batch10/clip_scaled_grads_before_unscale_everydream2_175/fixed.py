"""The trainer clips the gradients with clip_grad_norm_ right after scaler.scale(loss).backward(), so it clips the loss-scaled gradients (and every micro-batch) instead of the unscaled accumulated gradients.

source: https://github.com/victorchall/EveryDream2trainer/pull/175
symptom: silent
rule: ?
shape: optimizer wrapper class with two AdamW optimizers (text encoder, unet), GradScaler, gradient accumulation and grad-norm clipping, training loop over several epochs
"""
import torch
import torch.nn as nn

torch.manual_seed(0)


class Args:
    grad_accum = 2
    clip_grad_norm = 0.1
    amp = True


class EveryDreamOptimizer:
    def __init__(self, args, text_encoder, unet, epoch_len):
        self.epoch_len = epoch_len
        self.grad_accum = args.grad_accum
        self.clip_grad_norm = args.clip_grad_norm
        self.text_encoder_params = list(text_encoder.parameters())
        self.unet_params = list(unet.parameters())
        self.optimizer_te = torch.optim.AdamW(self.text_encoder_params, lr=3e-3, weight_decay=0.01)
        self.optimizer_unet = torch.optim.AdamW(self.unet_params, lr=3e-3, weight_decay=0.01)
        self.optimizers = [self.optimizer_te, self.optimizer_unet]
        self.scaler = torch.amp.GradScaler(
            "cpu",
            enabled=args.amp,
            init_scale=2**17.5,
            growth_factor=2,
            backoff_factor=1.0 / 2,
            growth_interval=25,
        )

    def step(self, loss, step, global_step):
        self.scaler.scale(loss).backward()

        if ((global_step + 1) % self.grad_accum == 0) or (step == self.epoch_len - 1):
            if self.clip_grad_norm is not None:
                for optimizer in self.optimizers:
                    self.scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(parameters=self.unet_params, max_norm=self.clip_grad_norm)
                torch.nn.utils.clip_grad_norm_(parameters=self.text_encoder_params, max_norm=self.clip_grad_norm)

            for optimizer in self.optimizers:
                self.scaler.step(optimizer)

            self.scaler.update()
            self._zero_grad(set_to_none=True)

    def _zero_grad(self, set_to_none=False):
        for optimizer in self.optimizers:
            optimizer.zero_grad(set_to_none=set_to_none)


class TextEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 16)
        self.proj = nn.Linear(16, 16)

    def forward(self, ids):
        return self.proj(torch.tanh(self.emb(ids))).mean(1)


class UNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(8 + 16 + 1, 32)
        self.out = nn.Linear(32, 8)

    def forward(self, x, t, cond):
        return self.out(torch.relu(self.inp(torch.cat([x, t, cond], 1))))


text_encoder = TextEncoder()
unet = UNet()
epoch_len = 8
ids = torch.randint(0, 10, (epoch_len, 16, 4))
latents = torch.randn(epoch_len, 16, 8) + ids.float().mean(-1, keepdim=True) / 5
ed_optimizer = EveryDreamOptimizer(Args(), text_encoder, unet, epoch_len)
w_te0 = text_encoder.proj.weight.detach().clone()
w_unet0 = unet.inp.weight.detach().clone()
global_step = 0
for epoch in range(3):
    for step in range(epoch_len):
        noise = torch.randn(16, 8)
        t = torch.rand(16, 1)
        noisy = (1 - t) * latents[step] + t * noise
        cond = text_encoder(ids[step])
        pred = unet(noisy, t, cond)
        loss = ((pred - noise) ** 2).mean()
        ed_optimizer.step(loss, step, global_step)
        global_step += 1
print("loss", round(loss.item(), 4))
print("te_drift", round((text_encoder.proj.weight - w_te0).norm().item(), 4))
print("unet_drift", round((unet.inp.weight - w_unet0).norm().item(), 4))
