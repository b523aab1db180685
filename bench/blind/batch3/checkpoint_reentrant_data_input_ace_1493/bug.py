"""The conditional SFNO checkpoints its input encoder with the default reentrant torch.utils.checkpoint; the checkpointed input is data that does not require grad, so the output has no grad_fn and the encoder parameters keep grad=None.

source: https://github.com/ai2cm/ace/pull/1493
symptom: none-grad
rule: ?
shape: weather-model nn.Module (encoder Sequential run through torch.utils.checkpoint in forward, processor blocks, decoder), MSE training step
"""
import warnings

import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

warnings.filterwarnings("ignore")
torch.manual_seed(0)


class ConditionalSFNO(nn.Module):
    def __init__(self, in_chans=3, embed_dim=8, out_chans=3, checkpointing=1):
        super().__init__()
        self.checkpointing = checkpointing
        self.encoder = nn.Sequential(nn.Conv2d(in_chans, embed_dim, 1), nn.GELU(), nn.Conv2d(embed_dim, embed_dim, 1, bias=False))
        self.blocks = nn.ModuleList(nn.Conv2d(embed_dim, embed_dim, 3, padding=1) for _ in range(2))
        self.decoder = nn.Conv2d(embed_dim, out_chans, 1)

    def forward(self, x):
        if self.checkpointing >= 1:
            x = checkpoint(self.encoder, x)  # bench: bug
        else:
            x = self.encoder(x)
        for blk in self.blocks:
            x = x + torch.nn.functional.gelu(blk(x))
        return self.decoder(x)


model = ConditionalSFNO()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
x, y = torch.randn(2, 3, 6, 6), torch.randn(2, 3, 6, 6)
for step in range(2):
    optimizer.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()

enc = model.encoder[0].weight.grad
print("loss", round(loss.item(), 4))
print("encoder_grad", None if enc is None else round(enc.norm().item(), 4))
print("decoder_grad", round(model.decoder.weight.grad.norm().item(), 4))
