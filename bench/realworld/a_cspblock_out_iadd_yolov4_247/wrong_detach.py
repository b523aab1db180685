"""CSPDarknet53 residual block adds the shortcut in place to a ReLU output

source: https://github.com/argusswift/YOLOv4-pytorch/issues/247
symptom: error
rule: GF204
shape: nn.Module residual block (`out += residual`) after a conv-bn-activation Sequential with activate='relu'
wrong: detach
why: adds the residual through `.data`, so no gradient flows along the skip connection and the ReLU mask of the block output is corrupted
"""
import torch
import torch.nn as nn

activate_name = {
    "relu": nn.ReLU,
    "leaky": nn.LeakyReLU,
    "linear": nn.Identity,
}


class Convolutional(nn.Module):
    def __init__(self, filters_in, filters_out, kernel_size, stride=1, norm="bn", activate="relu"):
        super(Convolutional, self).__init__()
        self.norm = norm
        self.activate = activate
        self.__conv = nn.Conv2d(filters_in, filters_out, kernel_size, stride, kernel_size // 2, bias=not norm)
        if norm:
            self.__norm = nn.BatchNorm2d(filters_out)
        if activate:
            self.__activate = activate_name[activate]()

    def forward(self, x):
        x = self.__conv(x)
        if self.norm:
            x = self.__norm(x)
        if self.activate:
            x = self.__activate(x)
        return x


class CSPBlock(nn.Module):
    def __init__(self, in_channels, out_channels, hidden_channels=None, residual_activation="linear"):
        super(CSPBlock, self).__init__()
        if hidden_channels is None:
            hidden_channels = out_channels
        self.block = nn.Sequential(
            Convolutional(in_channels, hidden_channels, 1),
            Convolutional(hidden_channels, out_channels, 3),
        )
        self.activation = activate_name[residual_activation]()

    def forward(self, x):
        residual = x
        out = self.block(x)
        out.data += residual
        return self.activation(out)


torch.manual_seed(0)
block = CSPBlock(8, 8)
x = torch.randn(2, 8, 6, 6, requires_grad=True)
loss = block(x).pow(2).mean()
loss.backward()
print(round(loss.item(), 4), round(x.grad.norm().item(), 4))
