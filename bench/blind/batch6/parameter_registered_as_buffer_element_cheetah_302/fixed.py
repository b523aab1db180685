"""The beam-line element stores every constructor argument with register_buffer, so an nn.Parameter passed at construction becomes a buffer, is missing from parameters() and is never optimised.

source: https://github.com/desy-ml/cheetah/issues/302
symptom: no-training
rule: ?
shape: physics library: Element nn.Modules (Drift, Quadrupole) built from tensors or Parameters, Segment tracking a beam, Adam on segment.parameters()
"""
import torch
import torch.nn as nn

torch.manual_seed(0)


class Element(nn.Module):
    def register_value(self, name, value):
        if isinstance(value, nn.Parameter):
            self.register_parameter(name, value)
        else:
            self.register_buffer(name, torch.as_tensor(value, dtype=torch.float32))


class Drift(Element):
    def __init__(self, length):
        super().__init__()
        self.register_value("length", length)

    def forward(self, x, xp):
        return x + self.length * xp, xp


class Quadrupole(Element):
    def __init__(self, length, k1):
        super().__init__()
        self.register_value("length", length)
        self.register_value("k1", k1)

    def forward(self, x, xp):
        return x, xp - self.k1 * self.length * x


class Segment(nn.Module):
    def __init__(self, elements):
        super().__init__()
        self.elements = nn.ModuleList(elements)

    def forward(self, x, xp):
        for e in self.elements:
            x, xp = e(x, xp)
        return x, xp


k1 = nn.Parameter(torch.tensor(0.5))
quad_len = nn.Parameter(torch.tensor(0.2))
quad = Quadrupole(quad_len, k1)
seg = Segment([Drift(1.0), quad, Drift(torch.tensor(2.0))])
seg.elements[1].k1 = nn.Parameter(torch.tensor(0.5))  # set after construction: this one registers
opt = torch.optim.Adam(seg.parameters(), lr=0.05)
x, xp = torch.randn(64) * 1e-3, torch.randn(64) * 1e-4 + 5e-4
for step in range(20):
    opt.zero_grad()
    xo, _ = seg(x, xp)
    loss = (xo * 1e3).pow(2).mean()
    loss.backward()
    opt.step()
print("n_params", len(list(seg.parameters())))
print("loss", round(loss.item(), 4))
print("quad length", round(seg.elements[1].length.item(), 4), "drift length", round(seg.elements[2].length.item(), 4))
