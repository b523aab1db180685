"""Folds BatchNorm into the preceding conv by assigning into `cconv.weight[:,:,:,:]` outside no_grad

source: https://github.com/PingoLH/FCHarDNet/issues/61
symptom: error
rule: GF201
shape: helper function called before testing: recursively fuse conv+bn, writing the fused weights into a fresh conv's parameters
wrong: dropped-term
why: removes the failing bias copy (and the bias), so the fused conv loses the folded batch-norm shift
"""
import torch
import torch.nn as nn


class ConvLayer(nn.Sequential):
    def __init__(self, in_channels, out_channels, kernel=3):
        super().__init__()
        self.add_module('conv', nn.Conv2d(in_channels, out_channels, kernel_size=kernel, padding=kernel // 2, bias=False))
        self.add_module('norm', nn.BatchNorm2d(out_channels))
        self.add_module('relu', nn.ReLU(inplace=True))


def fuse_bn_recursively(model):
    for name, module in model.named_children():
        if isinstance(module, ConvLayer):
            conv, bn = module.conv, module.norm
            w = conv.weight
            mean = bn.running_mean
            var_sqrt = torch.sqrt(bn.running_var + bn.eps)
            beta = bn.weight
            gamma = bn.bias
            W = w * (beta / var_sqrt).reshape([conv.out_channels, 1, 1, 1])
            b = (0 - mean) / var_sqrt * beta + gamma
            cconv = nn.Conv2d(conv.in_channels, conv.out_channels, conv.kernel_size, conv.stride, conv.padding, bias=False)
            with torch.no_grad():
                cconv.weight[:,:,:,:] = W[:,:,:,:]
            setattr(model, name, nn.Sequential(cconv, nn.ReLU(inplace=True)))
        else:
            fuse_bn_recursively(module)
    return model


torch.manual_seed(0)
model = nn.Sequential(ConvLayer(3, 8), ConvLayer(8, 8))
for m in model.modules():
    if isinstance(m, nn.BatchNorm2d):
        m.running_mean.uniform_(-0.5, 0.5)
        m.running_var.uniform_(0.5, 1.5)
model.eval()
x = torch.randn(1, 3, 8, 8)
with torch.no_grad():
    ref = model(x)
model = fuse_bn_recursively(model)
with torch.no_grad():
    out = model(x)
print(round((out - ref).abs().max().item(), 4), round(out.norm().item(), 4))
