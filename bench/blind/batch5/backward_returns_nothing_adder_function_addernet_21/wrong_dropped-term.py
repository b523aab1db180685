"""The adder autograd.Function computes grad_W_col and grad_X_col in backward but never returns them, so backward returns None and autograd raises "returned an incorrect number of gradients".

source: https://github.com/huawei-noah/AdderNet/issues/21
symptom: error
rule: ?
shape: custom autograd.Function (saved W_col/X_col, adaptive-gradient backward) inside an adder2d module of a small AdderNet classifier, one training step
wrong: dropped-term
why: returns a gradient only for the filters (grad_W_col, None), treating the unfolded input as a constant, so every layer below the adder layer gets no gradient
"""
import math
import torch
from torch import nn
from torch.autograd import Function

torch.manual_seed(0)


def adder2d_function(X, W, stride=1, padding=0):
    n_filters, d_filter, h_filter, w_filter = W.size()
    n_x, d_x, h_x, w_x = X.size()
    h_out = int((h_x - h_filter + 2 * padding) / stride + 1)
    w_out = int((w_x - w_filter + 2 * padding) / stride + 1)
    X_col = torch.nn.functional.unfold(X.view(1, -1, h_x, w_x), h_filter, dilation=1, padding=padding,
                                       stride=stride).view(n_x, -1, h_out * w_out)
    X_col = X_col.permute(1, 2, 0).contiguous().view(X_col.size(1), -1)
    W_col = W.view(n_filters, -1)
    out = adder.apply(W_col, X_col)
    out = out.view(n_filters, h_out, w_out, n_x)
    return out.permute(3, 0, 1, 2).contiguous()


class adder(Function):
    @staticmethod
    def forward(ctx, W_col, X_col):
        ctx.save_for_backward(W_col, X_col)
        return -(W_col.unsqueeze(2) - X_col.unsqueeze(0)).abs().sum(1)

    @staticmethod
    def backward(ctx, grad_output):
        W_col, X_col = ctx.saved_tensors
        grad_W_col = ((X_col.unsqueeze(0) - W_col.unsqueeze(2)) * grad_output.unsqueeze(1)).sum(2)
        grad_W_col = grad_W_col / grad_W_col.norm(p=2).clamp(min=1e-12) * math.sqrt(W_col.size(1) * W_col.size(0)) / 5
        grad_X_col = (-(X_col.unsqueeze(0) - W_col.unsqueeze(2)).clamp(-1, 1) * grad_output.unsqueeze(1)).sum(0)

        return grad_W_col, None


class adder2d(nn.Module):
    def __init__(self, input_channel, output_channel, kernel_size, stride=1, padding=0):
        super().__init__()
        self.stride, self.padding = stride, padding
        self.adder = nn.Parameter(nn.init.normal_(torch.randn(output_channel, input_channel, kernel_size, kernel_size)))

    def forward(self, x):
        return adder2d_function(x, self.adder, self.stride, self.padding)


class AdderNet(nn.Module):
    def __init__(self, n_classes=4):
        super().__init__()
        self.stem = nn.Conv2d(3, 4, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(4)
        self.add1 = adder2d(4, 6, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(6)
        self.fc = nn.Linear(6, n_classes)

    def forward(self, x):
        x = torch.relu(self.bn1(self.stem(x)))
        x = torch.relu(self.bn2(self.add1(x)))
        return self.fc(x.mean(dim=(2, 3)))


model = AdderNet()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(4, 3, 8, 8)
y = torch.randint(0, 4, (4,))
opt.zero_grad()
loss = nn.functional.cross_entropy(model(x), y)
loss.backward()
opt.step()


def gnorm(p):
    return None if p.grad is None else round(p.grad.norm().item(), 4)


print("loss", round(loss.item(), 4))
print("grad adder", gnorm(model.add1.adder))
print("grad stem", gnorm(model.stem.weight))
