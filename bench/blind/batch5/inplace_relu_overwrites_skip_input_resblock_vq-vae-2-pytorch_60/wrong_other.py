"""ResBlock opens its conv stack with nn.ReLU(inplace=True), which overwrites the block input, so the skip connection adds relu(input) instead of the pre-activation input and the model trains a different function without any error.

source: https://github.com/rosinality/vq-vae-2-pytorch/issues/60
symptom: silent
rule: ?
shape: VQ-VAE style encoder/decoder with residual blocks (nn.Sequential conv stacks), reconstruction loss, one optimizer step
wrong: other
why: replaces `out += input` with `out = out + input`, but the first inplace ReLU has already overwritten input, so the skip still adds relu(input) and the forward and gradients stay those of the bug
"""
import torch
from torch import nn
import torch.nn.functional as F

torch.manual_seed(0)


class ResBlock(nn.Module):
    def __init__(self, in_channel, channel):
        super().__init__()
        self.conv = nn.Sequential(
            nn.ReLU(inplace=True),
            nn.Conv2d(in_channel, channel, 3, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(channel, in_channel, 1),
        )

    def forward(self, input):
        out = self.conv(input)
        out = out + input
        return out


class Encoder(nn.Module):
    def __init__(self, in_channel, channel, n_res_block, n_res_channel):
        super().__init__()
        blocks = [
            nn.Conv2d(in_channel, channel // 2, 4, stride=2, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(channel // 2, channel, 3, padding=1),
        ]
        for _ in range(n_res_block):
            blocks.append(ResBlock(channel, n_res_channel))
        blocks.append(nn.ReLU(inplace=True))
        self.blocks = nn.Sequential(*blocks)

    def forward(self, input):
        return self.blocks(input)


class Decoder(nn.Module):
    def __init__(self, channel, out_channel, n_res_block, n_res_channel):
        super().__init__()
        blocks = [nn.Conv2d(channel, channel, 3, padding=1)]
        for _ in range(n_res_block):
            blocks.append(ResBlock(channel, n_res_channel))
        blocks.append(nn.ReLU(inplace=True))
        blocks.append(nn.ConvTranspose2d(channel, out_channel, 4, stride=2, padding=1))
        self.blocks = nn.Sequential(*blocks)

    def forward(self, input):
        return self.blocks(input)


class AutoEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = Encoder(3, 16, 2, 8)
        self.dec = Decoder(16, 3, 2, 8)

    def forward(self, x):
        return self.dec(self.enc(x))


model = AutoEncoder()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
x = torch.randn(4, 3, 16, 16)
for step in range(3):
    opt.zero_grad()
    loss = F.mse_loss(model(x), x)
    loss.backward()
    opt.step()
print("loss", round(loss.item(), 4))
print("grad enc conv0", round(model.enc.blocks[0].weight.grad.norm().item(), 4))
print("grad dec res0", round(model.dec.blocks[1].conv[1].weight.grad.norm().item(), 4))
