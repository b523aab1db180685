"""Rewrites a slice of a conv output with itself times another tensor (`x[0, :, 0, 0] = x[0, :, 0, 0] * var`)

source: https://github.com/pytorch/pytorch/issues/55980
symptom: error
rule: GF202
shape: nn.Module forward, self-referencing slice assignment on a layer output
wrong: detach
why: writes the product through `x.data`, so the write is invisible to autograd: var gets no gradient and x[0, :, 0, 0] keeps the gradient of its old value
"""
import torch


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(12, 12, 3)
    def forward(self, x, y):
        x = self.conv(x)
        y = self.conv(y)
        var = y.flatten()
        x.data[0, :, 0, 0] = x[0, :, 0, 0] * var

        loss = torch.mean(x)
        return loss

torch.manual_seed(0)
model = Model()

x = torch.ones([1, 12, 3, 3]).float()
y = torch.ones([1, 12, 3, 3]).float()
loss = model(x, y)

loss.backward()
print(round(loss.item(), 4), round(model.conv.weight.grad.norm().item(), 4))
