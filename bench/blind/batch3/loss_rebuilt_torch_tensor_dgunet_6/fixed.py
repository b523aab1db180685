"""The multi-stage losses are collected into torch.tensor([...], requires_grad=True), which copies their values into a new leaf, so backward never reaches the network and every parameter gradient stays None.

source: https://github.com/MC-E/Deep-Generalized-Unfolding-Networks-for-Image-Restoration/issues/6
symptom: none-grad
rule: ?
shape: image restoration training loop; multi-stage network returns a list of stage outputs; Charbonnier and Edge loss modules summed over stages
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class CharbonnierLoss(nn.Module):
    def __init__(self, eps=1e-3):
        super().__init__()
        self.eps = eps

    def forward(self, x, y):
        diff = x - y
        return torch.mean(torch.sqrt(diff * diff + self.eps * self.eps))


class EdgeLoss(nn.Module):
    def __init__(self):
        super().__init__()
        k = torch.tensor([[0.05, 0.25, 0.4, 0.25, 0.05]])
        self.kernel = torch.matmul(k.t(), k).unsqueeze(0).unsqueeze(0)
        self.loss = CharbonnierLoss()

    def conv_gauss(self, img):
        return F.conv2d(F.pad(img, (2, 2, 2, 2), mode="replicate"), self.kernel)

    def laplacian_kernel(self, current):
        filtered = self.conv_gauss(current)
        down = filtered[:, :, ::2, ::2]
        new_filter = torch.zeros_like(filtered)
        new_filter[:, :, ::2, ::2] = down * 4
        return current - self.conv_gauss(new_filter)

    def forward(self, x, y):
        return self.loss(self.laplacian_kernel(x), self.laplacian_kernel(y))


class MultiStageNet(nn.Module):
    def __init__(self, stages=3):
        super().__init__()
        self.stages = nn.ModuleList(nn.Conv2d(2, 1, 3, padding=1) for _ in range(stages))

    def forward(self, y):
        x, outs = y, []
        for conv in self.stages:
            x = x + conv(torch.cat([x, y], 1))
            outs.insert(0, x)
        return outs  # last stage first


model = MultiStageNet()
optimizer = torch.optim.Adam(model.parameters(), lr=2e-4)
criterion_char, criterion_edge = CharbonnierLoss(), EdgeLoss()
for it in range(2):
    input_, target = torch.randn(2, 1, 8, 8), torch.randn(2, 1, 8, 8)
    optimizer.zero_grad()
    restored = model(input_)
    loss_char = torch.stack([criterion_char(restored[j], target) for j in range(len(restored))]).sum()
    loss_edge = torch.stack([criterion_edge(restored[j], target) for j in range(len(restored))]).sum()
    loss = loss_char + 0.05 * loss_edge
    loss.backward()
    optimizer.step()

g = model.stages[0].weight.grad
print("loss", round(loss.item(), 4))
print("stage0_grad", None if g is None else round(g.norm().item(), 4))
print("stage2_grad", None if model.stages[2].weight.grad is None else round(model.stages[2].weight.grad.norm().item(), 4))
