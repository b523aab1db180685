"""The pure-torch softmax-splatting fallback module disables autograd globally when it is imported, so fine-tuning the interpolation network fails because the loss has no grad_fn.

source: https://github.com/98mxr/GMFSS_Fortuna/pull/11
symptom: error
rule: ?
shape: frame-interpolation library: softsplat helper module (forward warping by flow with softmax weights), flow/fusion nn.Module fine-tuned with an L1 loss
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)

# ---- model/softsplat_torch.py (module level, runs at import) ----


def softsplat(ten_in, flow, metric):
    B, C, H, W = ten_in.shape
    gy, gx = torch.meshgrid(torch.arange(H, dtype=flow.dtype), torch.arange(W, dtype=flow.dtype), indexing="ij")
    tx = (gx + flow[:, 0]).round().clamp(0, W - 1).long()
    ty = (gy + flow[:, 1]).round().clamp(0, H - 1).long()
    idx = (ty * W + tx).view(B, 1, -1)
    w = metric.exp().view(B, 1, -1)
    num = torch.zeros(B, C, H * W).scatter_add(2, idx.expand(-1, C, -1), (ten_in * metric.exp()).view(B, C, -1))
    den = torch.zeros(B, 1, H * W).scatter_add(2, idx, w)
    return (num / (den + 1e-7)).view(B, C, H, W)


# ---- model/GMFSS.py ----
class FusionNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.metric = nn.Conv2d(3, 1, 3, padding=1)
        self.fuse = nn.Conv2d(6, 3, 3, padding=1)

    def forward(self, img0, img1, flow01, flow10):
        w0 = softsplat(img0, flow01 * 0.5, self.metric(img0))
        w1 = softsplat(img1, flow10 * 0.5, self.metric(img1))
        return torch.sigmoid(self.fuse(torch.cat([w0, w1], 1)))


model = FusionNet()
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
img0, img1, gt = torch.rand(2, 3, 8, 8), torch.rand(2, 3, 8, 8), torch.rand(2, 3, 8, 8)
flow01, flow10 = torch.randn(2, 2, 8, 8), torch.randn(2, 2, 8, 8)
w0 = model.fuse.weight.detach().clone()
for step in range(3):
    opt.zero_grad()
    loss = F.l1_loss(model(img0, img1, flow01, flow10), gt)
    loss.backward()
    opt.step()
print("loss", round(loss.item(), 4))
print("fuse weight change", round((model.fuse.weight - w0).norm().item(), 4))
print("metric weight", round(model.metric.weight.norm().item(), 4))
