"""scatter_softmax exponentiates with exp_() and then normalises with div_() in place on the exp output that exp's backward saved.

source: https://github.com/rusty1s/pytorch_scatter/issues/119
symptom: error
rule: ?
shape: library helper (segment softmax over a scatter index) used by a graph-attention layer (nn.Module with Linear submodules)
"""
import torch
import torch.nn as nn

torch.manual_seed(0)


def scatter_add(src, index, dim_size):
    out = torch.zeros(dim_size, dtype=src.dtype)
    return out.scatter_add(0, index, src)


def scatter_max(src, index, dim_size):
    out = torch.full((dim_size,), float("-inf"), dtype=src.dtype)
    return out.scatter_reduce(0, index, src, reduce="amax", include_self=True)


def scatter_softmax(src, index, dim_size, eps=1e-16):
    max_per_src = scatter_max(src, index, dim_size).gather(0, index)
    recentered = src - max_per_src
    exped = recentered.exp()
    norm = (scatter_add(exped, index, dim_size) + eps).gather(0, index)
    return exped / norm


class EdgeAttention(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.score = nn.Linear(2 * dim, 1)
        self.value = nn.Linear(dim, dim)

    def forward(self, x, src_idx, dst_idx, n):
        e = self.score(torch.cat([x[src_idx], x[dst_idx]], -1)).squeeze(-1)
        a = scatter_softmax(e, dst_idx, n)
        msg = a.unsqueeze(-1) * self.value(x[src_idx])
        out = torch.zeros(n, x.shape[1]).index_add(0, dst_idx, msg)
        return out


n, dim = 6, 4
x = torch.randn(n, dim)
src_idx = torch.tensor([0, 1, 2, 3, 4, 5, 1, 2, 0])
dst_idx = torch.tensor([1, 0, 0, 2, 2, 3, 3, 4, 5])
layer = EdgeAttention(dim)
target = torch.randn(n, dim)
loss = ((layer(x, src_idx, dst_idx, n) - target) ** 2).mean()
loss.backward()
print("loss", round(loss.item(), 4))
print("score grad", round(layer.score.weight.grad.norm().item(), 4))
print("value grad", round(layer.value.weight.grad.norm().item(), 4))
