"""The discriminator's ActFirstResBlock feeds x to a 1x1 shortcut conv and then to a Conv2dBlock whose first op is an inplace LeakyReLU, which overwrites the x the shortcut conv saved for backward.

source: https://github.com/NVlabs/FUNIT/issues/23
symptom: error
rule: ?
shape: GAN discriminator built from Conv2dBlock/ActFirstResBlock modules; activation-first block with nn.LeakyReLU(inplace=True) after a learned 1x1 shortcut; one D step
"""
import torch
import torch.nn as nn

torch.manual_seed(0)


class Conv2dBlock(nn.Module):
    def __init__(self, in_dim, out_dim, ks, st, padding=0, activation="lrelu", activation_first=False, use_bias=True):
        super().__init__()
        self.activation_first = activation_first
        # ZeroPad2d(0) returned its input as a view in the reported torch version
        self.pad = nn.ReflectionPad2d(padding) if padding else nn.Identity()
        if activation == "lrelu":
            self.activation = nn.LeakyReLU(0.2, inplace=True)  # bench: bug
        else:
            self.activation = None
        self.conv = nn.Conv2d(in_dim, out_dim, ks, st, bias=use_bias)

    def forward(self, x):
        if self.activation_first:
            if self.activation:
                x = self.activation(x)
            x = self.conv(self.pad(x))
        else:
            x = self.conv(self.pad(x))
            if self.activation:
                x = self.activation(x)
        return x


class ActFirstResBlock(nn.Module):
    def __init__(self, fin, fout):
        super().__init__()
        self.learned_shortcut = fin != fout
        fhid = min(fin, fout)
        self.conv_0 = Conv2dBlock(fin, fhid, 3, 1, padding=1, activation_first=True)
        self.conv_1 = Conv2dBlock(fhid, fout, 3, 1, padding=1, activation_first=True)
        if self.learned_shortcut:
            self.conv_s = Conv2dBlock(fin, fout, 1, 1, activation="none", use_bias=False)

    def forward(self, x):
        x_s = self.conv_s(x) if self.learned_shortcut else x
        dx = self.conv_0(x)
        dx = self.conv_1(dx)
        return x_s + dx


class Discriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, 1, 1)
        self.blocks = nn.Sequential(ActFirstResBlock(8, 8), ActFirstResBlock(8, 16))
        self.head = nn.Conv2d(16, 1, 1)

    def forward(self, x):
        return self.head(self.blocks(self.stem(x))).mean(dim=(1, 2, 3))


D = Discriminator()
real = torch.randn(4, 3, 8, 8)
loss = torch.relu(1.0 - D(real)).mean()
loss.backward()
print("loss", round(loss.item(), 4))
print("stem grad", round(D.stem.weight.grad.norm().item(), 4))
print("shortcut grad", round(D.blocks[1].conv_s.conv.weight.grad.norm().item(), 4))
