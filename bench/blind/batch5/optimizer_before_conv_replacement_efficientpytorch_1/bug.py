"""The training script builds the optimizer from model.parameters() and only then replaces every Conv2d by a quantized Conv2dSQ with fresh parameters, so the optimizer steps the discarded convs and the network that runs never trains.

source: https://github.com/hustzxd/EfficientPyTorch/issues/1
symptom: no-training
rule: ?
shape: training script: small CNN, recursive module replacement by a quantized conv wrapper, SGD loop over a few steps
"""
import torch
from torch import nn
import torch.nn.functional as F

torch.manual_seed(0)


class Conv2dSQ(nn.Conv2d):
    """Conv2d with a learned step size that fake-quantizes its weight."""

    def __init__(self, conv, nbits_w=4):
        super().__init__(conv.in_channels, conv.out_channels, conv.kernel_size,
                         stride=conv.stride, padding=conv.padding, bias=conv.bias is not None)
        self.weight = nn.Parameter(conv.weight.detach().clone())
        if conv.bias is not None:
            self.bias = nn.Parameter(conv.bias.detach().clone())
        self.alpha = nn.Parameter(conv.weight.detach().abs().mean() * 2)
        self.qmax = 2 ** (nbits_w - 1) - 1

    def forward(self, x):
        w = self.weight / self.alpha
        wq = (w.round().clamp(-self.qmax, self.qmax) - w).detach() + w
        return F.conv2d(x, wq * self.alpha, self.bias, self.stride, self.padding)


def replace_conv_recursively(model, nbits_w=4):
    for name, child in model.named_children():
        if type(child) is nn.Conv2d:
            setattr(model, name, Conv2dSQ(child, nbits_w))
        else:
            replace_conv_recursively(child, nbits_w)
    return model


model = nn.Sequential(
    nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(),
    nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.ReLU()),
    nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 5),
)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)  # bench: bug
replace_conv_recursively(model, nbits_w=4)
criterion = nn.CrossEntropyLoss()
x = torch.randn(16, 3, 12, 12)
y = torch.randint(0, 5, (16,))
w0 = model[0].weight.detach().clone()
for step in range(5):
    optimizer.zero_grad()
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
print("loss", round(loss.item(), 4))
print("conv0 weight change", round((model[0].weight - w0).norm().item(), 4))
print("conv0 alpha", round(model[0].alpha.item(), 4))
