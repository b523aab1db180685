"""The user creates the input sequences with requires_grad=True and then moves them to the loss device, so X is a non-leaf copy and X.grad stays None after backward through the SoftDTW loss.

source: https://github.com/toinsson/pysdtw/issues/2
symptom: none-grad
rule: ?
shape: loss-library nn.Module (SoftDTW with a pairwise distance function and a soft-min recursion) on a batch of sequences, gradient read from the input
"""
import torch
import torch.nn as nn

torch.manual_seed(0)
device = torch.float64  # stand-in for torch.device("cuda"): .to() returns a new tensor


def pairwise_l2_squared(x, y):
    return ((x[:, :, None, :] - y[:, None, :, :]) ** 2).sum(-1)


class SoftDTW(nn.Module):
    def __init__(self, gamma=1.0, dist_func=pairwise_l2_squared):
        super().__init__()
        self.gamma, self.dist_func = gamma, dist_func

    def forward(self, x, y):
        D = self.dist_func(x, y)
        B, N, M = D.shape
        inf = torch.full((B,), float("inf"), dtype=D.dtype)
        R = [[None] * (M + 1) for _ in range(N + 1)]
        for i in range(N + 1):
            for j in range(M + 1):
                R[i][j] = torch.zeros(B, dtype=D.dtype) if i == j == 0 else inf
        for i in range(1, N + 1):
            for j in range(1, M + 1):
                prev = torch.stack([R[i - 1][j - 1], R[i - 1][j], R[i][j - 1]], dim=-1)
                R[i][j] = D[:, i - 1, j - 1] - self.gamma * torch.logsumexp(-prev / self.gamma, dim=-1)
        return R[N][M]


X = torch.rand((4, 5, 3)).to(device).requires_grad_(True)
Y = torch.rand((4, 6, 3)).to(device)
sdtw = SoftDTW(gamma=1.0)
loss = sdtw(X, Y).sum()
loss.backward()
print("loss", round(loss.item(), 4))
print("X grad", None if X.grad is None else round(X.grad.norm().item(), 4))
