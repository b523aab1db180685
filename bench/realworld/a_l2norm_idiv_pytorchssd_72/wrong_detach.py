"""SSD L2Norm layer divides its input in place by the norm computed from it (`x /= norm`)

source: https://github.com/lzx1413/PytorchSSD/issues/72
symptom: error
rule: GF204
shape: nn.Module forward of a normalisation layer, `norm = x.pow(2)...` then `x /= norm`
wrong: detach
why: divides by a detached norm, so the gradient through the normalisation is dropped
"""
import torch
import torch.nn as nn
import torch.nn.init as init


class L2Norm(nn.Module):
    def __init__(self,n_channels, scale):
        super(L2Norm,self).__init__()
        self.n_channels = n_channels
        self.gamma = scale or None
        self.eps = 1e-10
        self.weight = nn.Parameter(torch.Tensor(self.n_channels))
        self.reset_parameters()

    def reset_parameters(self):
        init.constant_(self.weight,self.gamma)

    def forward(self, x):
        norm = x.pow(2).sum(dim=1, keepdim=True).sqrt()+self.eps
        x = x / norm.detach()
        out = self.weight.unsqueeze(0).unsqueeze(2).unsqueeze(3).expand_as(x) * x
        return out


torch.manual_seed(0)
conv4_3 = nn.Conv2d(3, 16, 3, padding=1)
L2Norm_layer = L2Norm(16, 20)
img = torch.randn(2, 3, 8, 8)
s = L2Norm_layer(conv4_3(img))
loss = s[:, :4].mean()
loss.backward()
print(round(loss.item(), 4), round(conv4_3.weight.grad.norm().item(), 4))
