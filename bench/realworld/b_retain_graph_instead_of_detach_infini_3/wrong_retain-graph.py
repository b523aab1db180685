"""Segment-wise training with a compressive memory: backward(retain_graph=True) silences "backward through the graph a second time", but every step backpropagates into all earlier segments

source: https://github.com/jlamprou/Infini-Attention/issues/3
symptom: wrong-value
rule: GF401
shape: nn.Module with memory state M, z updated in _update_memory and carried across segments; one backward per segment
wrong: retain-graph
why: detaches the memory matrix M but not the normaliser z and keeps retain_graph=True, so gradients still flow through z into earlier segments
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class InfiniAttention(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.q = nn.Linear(dim, dim)
        self.k = nn.Linear(dim, dim)
        self.v = nn.Linear(dim, dim)
        self.M = None
        self.z = None

    def _update_memory(self, k, v):
        sigma_k = F.elu(k) + 1
        if self.M is None:
            self.M = sigma_k.transpose(-2, -1) @ v
            self.z = sigma_k.sum(dim=-2)
        else:
            self.M = self.M + sigma_k.transpose(-2, -1) @ v
            self.z = self.z + sigma_k.sum(dim=-2)
        # the memory is state carried to the next segment, not something to backprop into
        self.M = self.M.detach()

    def forward(self, x):
        q, k, v = self.q(x), self.k(x), self.v(x)
        if self.M is None:
            a_mem = torch.zeros_like(v)
        else:
            sigma_q = F.elu(q) + 1
            a_mem = (sigma_q @ self.M) / (sigma_q @ self.z.unsqueeze(-1) + 1e-6)
        self._update_memory(k, v)
        return a_mem + F.softmax(q @ k.transpose(-2, -1), dim=-1) @ v


torch.manual_seed(0)
model = InfiniAttention(4)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
segments = torch.randn(3, 5, 4)
targets = torch.randn(3, 5, 4)
grad_norms = []
for seg, tgt in zip(segments, targets):
    optimizer.zero_grad()
    loss = F.mse_loss(model(seg), tgt)
    loss.backward(retain_graph=True)
    grad_norms.append(round(model.k.weight.grad.norm().item(), 4))
    optimizer.step()
print("grad norms per segment:", grad_norms)
