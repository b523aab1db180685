"""The coupling block scales the subnet output with `a *= 0.1` in place, overwriting the output the subnet's final Tanh saved for backward.

source: https://github.com/vislearn/FrEIA/pull/164
symptom: error
rule: ?
shape: normalizing flow of two nn.Module coupling blocks (affine coupling, global scaling, fixed permutation), NLL loss, Adam training loop
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


def subnet_fc(c_in, c_out):
    return nn.Sequential(nn.Linear(c_in, 16), nn.ReLU(), nn.Linear(16, c_out), nn.Tanh())


class AllInOneBlock(nn.Module):
    def __init__(self, channels, subnet_constructor, affine_clamping=2.0, global_affine_init=1.0):
        super().__init__()
        self.splits = [channels - channels // 2, channels // 2]
        self.sum_dims = (1,)
        self.clamp = affine_clamping
        global_scale = 2.0 - torch.log(torch.tensor(10.0 / global_affine_init - 1.0))
        self.global_scale = nn.Parameter(torch.ones(1, channels) * global_scale)
        self.global_offset = nn.Parameter(torch.zeros(1, channels))
        w = torch.eye(channels)[torch.randperm(channels)]
        self.w_perm = nn.Parameter(w, requires_grad=False)
        self.subnet = subnet_constructor(self.splits[0], 2 * self.splits[1])

    def _permute(self, x):
        scale = 10 * torch.sigmoid(self.global_scale - 2.0)
        perm_log_jac = torch.sum(torch.log(scale))
        return F.linear(x * scale + self.global_offset, self.w_perm), perm_log_jac

    def _affine(self, x, a):
        # the entire coupling coefficient tensor is scaled down by a
        # factor of ten for stability and easier initialization.
        a = a * 0.1
        ch = x.shape[1]
        sub_jac = self.clamp * torch.tanh(a[:, :ch])
        return x * torch.exp(sub_jac) + a[:, ch:], torch.sum(sub_jac, dim=self.sum_dims)

    def forward(self, x):
        x1, x2 = torch.split(x, self.splits, dim=1)
        a1 = self.subnet(x1)
        x2, j2 = self._affine(x2, a1)
        log_jac_det = j2
        x_out = torch.cat((x1, x2), 1)
        x_out, global_scaling_jac = self._permute(x_out)
        n_pixels = x_out[0, :1].numel()
        log_jac_det = log_jac_det + n_pixels * global_scaling_jac
        return x_out, log_jac_det


class Flow(nn.Module):
    def __init__(self, channels, n_blocks=2):
        super().__init__()
        self.blocks = nn.ModuleList(AllInOneBlock(channels, subnet_fc) for _ in range(n_blocks))

    def forward(self, x):
        log_jac = torch.zeros(x.shape[0])
        for block in self.blocks:
            x, j = block(x)
            log_jac = log_jac + j
        return x, log_jac


flow = Flow(4)
opt = torch.optim.Adam(flow.parameters(), lr=1e-3)
data = torch.randn(32, 4) @ torch.tensor([[1.0, 0.5, 0, 0], [0, 1.0, 0.3, 0], [0, 0, 1.0, 0.2], [0, 0, 0, 0.5]])

for step in range(3):
    opt.zero_grad()
    z, log_jac = flow(data)
    loss = (0.5 * (z**2).sum(1) - log_jac).mean()
    loss.backward()
    opt.step()


def grad_norm(p):
    return None if p.grad is None else round(p.grad.norm().item(), 4)


print("loss", round(loss.item(), 4))
print("subnet grad norm", grad_norm(flow.blocks[0].subnet[2].weight))
print("global scale grad norm", grad_norm(flow.blocks[1].global_scale))
