"""The residual Encoding/Decoding blocks add the 1x1 residual connection in place (`x += connection`) to the output of conv2's ReLU, which ReLU's backward still needs, so backward raises the in-place modification error.

source: https://github.com/fepegar/unet/pull/37
symptom: error
rule: ?
shape: U-Net library (ConvolutionalBlock = conv/norm/ReLU Sequential, residual EncodingBlocks with pooling and skip connections, DecodingBlock with upsampling and concatenation), segmentation loss, one optimizer step
"""
import torch
from torch import nn
import torch.nn.functional as F

torch.manual_seed(0)


class ConvolutionalBlock(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size=3, normalization=True, activation="ReLU"):
        super().__init__()
        block = nn.ModuleList()
        self.conv_layer = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2,
                                    bias=not normalization)
        block.append(self.conv_layer)
        if normalization:
            block.append(nn.BatchNorm2d(out_channels))
        if activation is not None:
            block.append(getattr(nn, activation)())
        self.block = nn.Sequential(*block)

    def forward(self, x):
        return self.block(x)


class EncodingBlock(nn.Module):
    def __init__(self, in_channels, out_channels, residual=True, pooling=True):
        super().__init__()
        self.residual = residual
        self.conv1 = ConvolutionalBlock(in_channels, out_channels)
        self.conv2 = ConvolutionalBlock(out_channels, out_channels)
        if residual:
            self.conv_residual = ConvolutionalBlock(in_channels, out_channels, kernel_size=1,
                                                    normalization=False, activation=None)
        self.downsample = nn.MaxPool2d(2) if pooling else None

    def forward(self, x):
        if self.residual:
            connection = self.conv_residual(x)
            x = self.conv1(x)
            x = self.conv2(x)
            x += connection  # bench: bug
        else:
            x = self.conv1(x)
            x = self.conv2(x)
        if self.downsample is None:
            return x
        skip_connection = x
        return self.downsample(x), skip_connection


class DecodingBlock(nn.Module):
    def __init__(self, in_channels, skip_channels, out_channels, residual=True):
        super().__init__()
        self.residual = residual
        self.conv1 = ConvolutionalBlock(in_channels + skip_channels, out_channels)
        self.conv2 = ConvolutionalBlock(out_channels, out_channels)
        if residual:
            self.conv_residual = ConvolutionalBlock(in_channels + skip_channels, out_channels, kernel_size=1,
                                                    normalization=False, activation=None)

    def forward(self, skip_connection, x):
        x = F.interpolate(x, size=skip_connection.shape[-2:], mode="nearest")
        x = torch.cat((skip_connection, x), dim=1)
        if self.residual:
            connection = self.conv_residual(x)
            x = self.conv1(x)
            x = self.conv2(x)
            x += connection  # bench: bug
        else:
            x = self.conv1(x)
            x = self.conv2(x)
        return x


class UNet(nn.Module):
    def __init__(self, in_channels=1, n_classes=2, c=4):
        super().__init__()
        self.enc1 = EncodingBlock(in_channels, c)
        self.enc2 = EncodingBlock(c, 2 * c)
        self.bottom = EncodingBlock(2 * c, 2 * c, pooling=False)
        self.dec2 = DecodingBlock(2 * c, 2 * c, 2 * c)
        self.dec1 = DecodingBlock(2 * c, c, c)
        self.classifier = nn.Conv2d(c, n_classes, 1)

    def forward(self, x):
        x, skip1 = self.enc1(x)
        x, skip2 = self.enc2(x)
        x = self.bottom(x)
        x = self.dec2(skip2, x)
        x = self.dec1(skip1, x)
        return self.classifier(x)


model = UNet()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
img = torch.randn(2, 1, 16, 16)
mask = torch.randint(0, 2, (2, 16, 16))
opt.zero_grad()
loss = F.cross_entropy(model(img), mask)
loss.backward()
opt.step()


def gnorm(p):
    return None if p.grad is None else round(p.grad.norm().item(), 4)


print("loss", round(loss.item(), 4))
print("grad enc1 conv_residual", gnorm(model.enc1.conv_residual.conv_layer.weight))
print("grad enc1 conv1", gnorm(model.enc1.conv1.conv_layer.weight))
