"""CSB block writes its quadrants into `out = x`, an alias of the input that the DRB branch's conv saved

source: https://github.com/Jee-King/TSAN/issues/3
symptom: error
rule: GF204
shape: nn.Module forward, `out = x` then slice assignments `out[:, :, a:b, c:d] = ...`; the caller feeds x to another conv first
wrong: detach
why: writes the quadrants into `x.data`, so the in-place write escapes the version check but overwrites the input that DRB's conv saved for its weight gradient
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class DRB(nn.Module):
    def __init__(self, n_feats):
        super(DRB, self).__init__()
        self.conv_1_1 = nn.Conv2d(n_feats, n_feats, 1, padding=0, stride=1)
        self.relu = nn.ReLU(inplace=True)
        self.conv_1x1 = nn.Conv2d(n_feats, n_feats, kernel_size=1, padding=0, bias=False)

    def forward(self, x):
        out = self.relu(self.conv_1_1(x))
        out = self.conv_1x1(out)
        out = x + out
        return out


class CSB(nn.Module):
    def __init__(self, n_feats):
        super(CSB, self).__init__()
        self.conv1 = nn.Conv2d(n_feats*4, n_feats*4, kernel_size=1, padding=0, bias=False)

    def forward(self, x):
        f1 = x[:, : , 0:x.size(2)//2, 0:x.size(3)//2]
        f2 = x[:, : , x.size(2)//2:, 0:x.size(3)//2]
        f3 = x[:, : , 0:x.size(2)//2, x.size(3)//2:]
        f4 = x[:, : , x.size(2)//2:, x.size(3)//2:]
        f_all = torch.cat([f1,f2,f3,f4], 1)
        f_all = self.conv1(f_all)
        out = x.data
        out[:,:,0:x.size(2)//2, 0:x.size(3)//2] = f_all[:,0:f_all.size(1)//4,:,:]
        out[:,:,x.size(2)//2:, 0:x.size(3)//2] = f_all[:,f_all.size(1)//4:f_all.size(1)//2,:,:]
        out[:,:,0:x.size(2)//2, x.size(3)//2:] = f_all[:,f_all.size(1)//2:f_all.size(1)*3//4,:,:]
        out[:,:,x.size(2)//2:, x.size(3)//2:] = f_all[:,f_all.size(1)*3//4:,:,:]
        return out


class MCAB(nn.Module):
    def __init__(self, n_feats=8):
        super(MCAB, self).__init__()
        self.drb = DRB(n_feats)
        self.csb = CSB(n_feats)
        self.conv3 = nn.Conv2d(n_feats, n_feats, kernel_size=3, padding=1, bias=False)

    def forward(self, x):
        down_b = self.drb(x)
        top_b = self.csb(x)
        top_b = F.sigmoid(self.conv3(top_b))
        return down_b*top_b


torch.manual_seed(0)
first_conv = nn.Conv2d(3, 8, 1)
net = MCAB(8)
inp = torch.randn(2, 3, 8, 8)
out = net(first_conv(inp))
loss = out.pow(2).mean()
loss.backward()
print(round(loss.item(), 4), round(first_conv.weight.grad.norm().item(), 4))
