"""The quantization-aware-training Function passes the output gradient straight through (`return grad_output`) even for values that the forward clamped to the quantization range, so clipped activations still receive gradient.

source: https://github.com/microsoft/nni/issues/3159 (fix PR #3160)
symptom: silent
rule: ?
shape: custom torch.autograd.Function (fake quantization with a straight-through backward via a quant_backward static method) inside a quantizer wrapper module with EMA range tracking, MLP classifier, SGD training loop
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class QuantGrad(torch.autograd.Function):
    @staticmethod
    def _quantize(x, scale, zero_point):
        return torch.round(x / scale + zero_point)

    @staticmethod
    def quant_backward(tensor, grad_output, scale, zero_point, qmin, qmax):
        tensor_q = QuantGrad._quantize(tensor, scale, zero_point)
        mask = (tensor_q < qmin) | (tensor_q > qmax)
        grad_output[mask] = 0
        return grad_output

    @staticmethod
    def forward(ctx, tensor, scale, zero_point, qmin, qmax):
        ctx.save_for_backward(tensor, scale, zero_point, qmin, qmax)
        q = torch.clamp(QuantGrad._quantize(tensor, scale, zero_point), qmin, qmax)
        return (q - zero_point) * scale

    @staticmethod
    def backward(ctx, grad_output):
        tensor, scale, zero_point, qmin, qmax = ctx.saved_tensors
        output = QuantGrad.quant_backward(tensor, grad_output, scale, zero_point, qmin, qmax)
        return output, None, None, None, None


def update_quantization_param(bits, rmin, rmax):
    rmin = torch.min(rmin, torch.zeros_like(rmin))
    rmax = torch.max(rmax, torch.zeros_like(rmax))
    qmin = torch.tensor(0.0)
    qmax = torch.tensor(float((1 << bits) - 1))
    scale = (rmax - rmin) / (qmax - qmin)
    zero_point = torch.clamp(torch.round(qmin - rmin / scale), qmin, qmax)
    return scale, zero_point, qmin, qmax


class QuantizedOutput(nn.Module):
    """Wraps a layer and fake-quantizes its output with an EMA of the output range."""

    def __init__(self, module, bits=4, decay=0.9):
        super().__init__()
        self.module = module
        self.bits = bits
        self.decay = decay
        self.register_buffer("tracked_min", torch.tensor(-0.5))
        self.register_buffer("tracked_max", torch.tensor(0.5))

    def forward(self, x):
        out = self.module(x)
        scale, zero_point, qmin, qmax = update_quantization_param(self.bits, self.tracked_min, self.tracked_max)
        with torch.no_grad():
            self.tracked_min.mul_(self.decay).add_((1 - self.decay) * out.min())
            self.tracked_max.mul_(self.decay).add_((1 - self.decay) * out.max())
        return QuantGrad.apply(out, scale, zero_point, qmin, qmax)


model = nn.Sequential(
    QuantizedOutput(nn.Linear(10, 32)), nn.ReLU(), QuantizedOutput(nn.Linear(32, 16)), nn.ReLU(), nn.Linear(16, 3)
)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(64, 10) * 2.0
y = torch.randint(0, 3, (64,))

for step in range(3):
    opt.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()

print("loss", round(loss.item(), 4))
print("layer0 grad norm", round(model[0].module.weight.grad.norm().item(), 4))
print("layer2 grad norm", round(model[2].module.weight.grad.norm().item(), 4))
