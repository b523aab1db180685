"""KernelConv2DFunction.forward takes three inputs (input, kernel, kernel_size) but its backward returns only two gradients, so autograd rejects the backward of the filter-adaptive convolution.

source: https://github.com/sczhou/STFAN/issues/8
symptom: error
rule: ?
shape: video deblurring model: a kernel-prediction conv branch predicts per-pixel filters that a custom autograd.Function (KernelConv2DFunction, forward/backward with ctx.save_for_backward) applies to features; L1 loss to a sharp target
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class KernelConv2DFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, kernel, kernel_size):
        b, c, h, w = input.shape
        ctx.kernel_size = kernel_size
        ctx.save_for_backward(input, kernel)
        cols = F.unfold(input, kernel_size, padding=kernel_size // 2).view(b, c, kernel_size * kernel_size, h, w)
        return (cols * kernel.view(b, c, kernel_size * kernel_size, h, w)).sum(2)

    @staticmethod
    def backward(ctx, grad_output):
        input, kernel = ctx.saved_tensors
        k = ctx.kernel_size
        b, c, h, w = input.shape
        cols = F.unfold(input, k, padding=k // 2).view(b, c, k * k, h, w)
        grad_kernel = (grad_output.unsqueeze(2) * cols).view(b, c * k * k, h, w)
        grad_cols = (grad_output.unsqueeze(2) * kernel.view(b, c, k * k, h, w)).view(b, c * k * k, h * w)
        grad_input = F.fold(grad_cols, (h, w), k, padding=k // 2)
        return grad_input, grad_kernel, None


class KernelConv2D(nn.Module):
    def __init__(self, kernel_size):
        super().__init__()
        self.kernel_size = kernel_size

    def forward(self, input, kernel):
        return KernelConv2DFunction.apply(input, kernel, self.kernel_size)


class FilterAdaptiveBlock(nn.Module):
    def __init__(self, c=4, k=3):
        super().__init__()
        self.feat = nn.Conv2d(3, c, 3, padding=1)
        self.kernel_net = nn.Conv2d(3, c * k * k, 3, padding=1)
        self.fac = KernelConv2D(k)
        self.out = nn.Conv2d(c, 3, 3, padding=1)

    def forward(self, blurry):
        return self.out(self.fac(self.feat(blurry), self.kernel_net(blurry)))


model = FilterAdaptiveBlock()
blurry, sharp = torch.randn(2, 3, 6, 6), torch.randn(2, 3, 6, 6)
loss = F.l1_loss(model(blurry), sharp)
loss.backward()
g = model.kernel_net.weight.grad
print("loss", round(loss.item(), 4))
print("feat grad", round(model.feat.weight.grad.norm().item(), 4))
print("kernel_net grad", None if g is None else round(g.norm().item(), 4))
