"""AttentionConv creates its relative-position Parameters rel_h/rel_w inside forward, so every call replaces them with fresh random tensors that the optimizer (built before) never sees, and the positional embeddings are never learned.

source: https://github.com/leaderj1001/Stand-Alone-Self-Attention/issues/2
symptom: no-training
rule: ?
shape: local self-attention conv layer (query/key/value 1x1 convs, unfold, relative embeddings rel_h/rel_w) inside a small classifier; Adam built from model.parameters() before the first forward; three steps
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class AttentionConv(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, padding=0, groups=1):
        super().__init__()
        self.out_channels, self.kernel_size, self.padding, self.groups = out_channels, kernel_size, padding, groups
        self.key_conv = nn.Conv2d(in_channels, out_channels, 1, bias=False)
        self.query_conv = nn.Conv2d(in_channels, out_channels, 1, bias=False)
        self.value_conv = nn.Conv2d(in_channels, out_channels, 1, bias=False)
        self.rel_h = nn.Parameter(torch.randn(out_channels // 2, 1, 1, kernel_size, 1), requires_grad=True)
        self.rel_w = nn.Parameter(torch.randn(out_channels // 2, 1, 1, 1, kernel_size), requires_grad=True)

    def forward(self, x):
        batch, channels, height, width = x.size()
        padded_x = F.pad(x, [self.padding] * 4)
        q_out = self.query_conv(x)
        k_out = self.key_conv(padded_x).unfold(2, self.kernel_size, 1).unfold(3, self.kernel_size, 1)
        v_out = self.value_conv(padded_x).unfold(2, self.kernel_size, 1).unfold(3, self.kernel_size, 1)
        k_out_h, k_out_w = k_out.split(self.out_channels // 2, dim=1)
        k_out = torch.cat((k_out_h + self.rel_h, k_out_w + self.rel_w), dim=1)
        k_out = k_out.contiguous().view(batch, self.groups, self.out_channels // self.groups, height, width, -1)
        v_out = v_out.contiguous().view(batch, self.groups, self.out_channels // self.groups, height, width, -1)
        q_out = q_out.view(batch, self.groups, self.out_channels // self.groups, height, width, 1)
        out = F.softmax(q_out * k_out, dim=-1)
        return torch.einsum("bnchwk,bnchwk -> bnchw", out, v_out).reshape(batch, -1, height, width)


model = nn.Sequential(AttentionConv(3, 8, kernel_size=3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 2))
opt = torch.optim.Adam(model.parameters(), lr=0.05)
x, y = torch.randn(4, 3, 6, 6), torch.tensor([0, 1, 0, 1])
for _ in range(3):
    opt.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
print("loss", round(F.cross_entropy(model(x), y).item(), 4))
print("rel_h in optimizer", any(p is model[0].rel_h for g in opt.param_groups for p in g["params"]))
print("rel_h sum", round(model[0].rel_h.sum().item(), 4))
