"""The stochastic binarizer's custom autograd Function takes (input, is_training) but backward returns one gradient, so backward fails with an incorrect number of gradients.

source: https://github.com/1zb/pytorch-image-comp-rnn/issues/4
symptom: error
rule: ?
shape: image-compression autoencoder: encoder conv, Binarizer module (conv, tanh, custom sign Function with straight-through backward), decoder conv
wrong: dropped-term
why: returns None for the input too, treating the binarizer as non-differentiable, so the encoder and the binarizer conv get no gradient
"""
import torch
import torch.nn as nn
from torch.autograd import Function

torch.manual_seed(0)


class SignFunction(Function):
    @staticmethod
    def forward(ctx, input, is_training=True):
        if is_training:
            prob = input.new(input.size()).uniform_()
            x = input.clone()
            x[(1 - input) / 2 <= prob] = 1
            x[(1 - input) / 2 > prob] = -1
            return x
        return input.sign()

    @staticmethod
    def backward(ctx, grad_output):
        return None, None


class Binarizer(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(8, 4, 1, bias=False)

    def forward(self, x):
        return SignFunction.apply(torch.tanh(self.conv(x)), self.training)


class Codec(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Conv2d(3, 8, 3, padding=1)
        self.binarizer = Binarizer()
        self.decoder = nn.Conv2d(4, 3, 3, padding=1)

    def forward(self, img):
        return self.decoder(self.binarizer(self.encoder(img)))


model = Codec()
img = torch.rand(2, 3, 8, 8) - 0.5
loss = (model(img) - img).abs().mean()
loss.backward()
print("loss", round(loss.item(), 4))
g = model.encoder.weight.grad
print("encoder grad", None if g is None else round(g.norm().item(), 4))
print("binarizer grad", None if model.binarizer.conv.weight.grad is None else round(model.binarizer.conv.weight.grad.norm().item(), 4))
