"""The quantizer's range initialisation replaces its scale Parameter with a new one after the optimizer was built, so the optimizer keeps updating the orphaned old scale and the live one never trains.

source: https://github.com/openvinotoolkit/nncf/pull/327
symptom: no-training
rule: ?
shape: compression library: symmetric fake-quantizer nn.Module with a learnable scale, wrapped around a Linear; optimizer built before range init
wrong: other
why: wraps the old scale's storage in a new Parameter object; the value is right but the module now holds a Parameter the optimizer does not know, so the scale still never trains
"""
import torch
import torch.nn as nn

torch.manual_seed(0)


class SymmetricQuantizer(nn.Module):
    def __init__(self, levels=15):
        super().__init__()
        self.levels = levels
        self.scale = nn.Parameter(torch.ones(1))

    def apply_minmax_init(self, min_value, max_value):
        value = max(abs(min_value), abs(max_value))
        self.scale = nn.Parameter(self.scale.data.fill_(value))

    def forward(self, x):
        s = self.scale.abs() + 1e-4
        q = torch.clamp(x / s, -1, 1) * (self.levels // 2)
        q = (q.round() - q).detach() + q
        return q / (self.levels // 2) * s


class QuantizedLinear(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 4)
        self.input_quantizer = SymmetricQuantizer()

    def forward(self, x):
        return self.fc(self.input_quantizer(x))


model = QuantizedLinear()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(64, 6)
y = torch.randn(64, 4)
model.input_quantizer.apply_minmax_init(x.min().item(), x.max().item())
s0 = model.input_quantizer.scale.item()
for step in range(10):
    opt.zero_grad()
    loss = (model(x) - y).pow(2).mean()
    loss.backward()
    opt.step()
print("loss", round(loss.item(), 4))
print("scale change", round(model.input_quantizer.scale.item() - s0, 4))
