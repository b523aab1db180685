"""The graph-wise LayerNorm divides by var.sqrt() + eps, so a graph whose node features are constant (variance exactly 0, here a single all-zero node) puts sqrt(0) on the gradient path and its infinite derivative makes the gradients nan.

source: https://github.com/pyg-team/pytorch_geometric/pull/2917
symptom: nan-grad
rule: ?
shape: graph neural network library normalization module (per-graph mean/variance via index_add over the batch vector, affine) inside a small GNN with message passing and mean pooling, one training step
"""
import torch
from torch import nn

torch.manual_seed(0)


def scatter_add(src, index, dim_size):
    return torch.zeros(dim_size, *src.shape[1:]).index_add(0, index, src)


class LayerNorm(nn.Module):
    def __init__(self, in_channels, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(in_channels))
        self.bias = nn.Parameter(torch.zeros(in_channels))

    def forward(self, x, batch):
        batch_size = int(batch.max()) + 1
        norm = torch.bincount(batch, minlength=batch_size).clamp(min=1).to(x.dtype)
        norm = (norm * x.size(-1)).view(-1, 1)
        mean = scatter_add(x, batch, batch_size).sum(dim=-1, keepdim=True) / norm
        x = x - mean[batch]
        var = scatter_add(x * x, batch, batch_size).sum(dim=-1, keepdim=True) / norm
        out = x / (var + self.eps).sqrt()[batch]
        return out * self.weight + self.bias


class GNN(nn.Module):
    def __init__(self, cin=3, hidden=8):
        super().__init__()
        self.lin1 = nn.Linear(cin, hidden, bias=False)
        self.norm = LayerNorm(hidden)
        self.lin2 = nn.Linear(hidden, hidden)
        self.out = nn.Linear(hidden, 1)

    def forward(self, x, edge_index, batch):
        h = self.lin1(x)
        src, dst = edge_index
        h = h + torch.zeros_like(h).index_add(0, dst, h[src])
        h = torch.relu(self.lin2(self.norm(h, batch)))
        n_graphs = int(batch.max()) + 1
        pooled = scatter_add(h, batch, n_graphs) / torch.bincount(batch).view(-1, 1)
        return self.out(pooled).squeeze(-1)


x = torch.cat([torch.randn(4, 3), torch.zeros(1, 3)])  # graph 1: 4 nodes, graph 2: one empty-feature node
edge_index = torch.tensor([[0, 1, 2, 3], [1, 2, 3, 0]])
batch = torch.tensor([0, 0, 0, 0, 1])
y = torch.tensor([1.0, 0.0])
model = GNN()
loss = (model(x, edge_index, batch) - y).pow(2).mean()
loss.backward()
print("loss", round(loss.item(), 4))
print("grad lin1", round(model.lin1.weight.grad.norm().item(), 4))
print("grad norm weight", round(model.norm.weight.grad.norm().item(), 4))
