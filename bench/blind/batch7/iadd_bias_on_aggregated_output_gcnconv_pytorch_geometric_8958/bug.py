"""The message-passing example adds the bias in place (out += self.bias) to the aggregated output; with a max aggregation, whose backward reads its own result, backward fails with "modified by an inplace operation".

source: https://github.com/pyg-team/pytorch_geometric/pull/8958
symptom: error
rule: ?
shape: library GNN layer (GCNConv-style MessagePassing nn.Module with Linear and bias Parameter), node regression loss, one backward
"""
import torch
import torch.nn as nn

torch.manual_seed(0)


def add_self_loops(edge_index, num_nodes):
    loop = torch.arange(num_nodes)
    return torch.cat([edge_index, torch.stack([loop, loop])], 1)


def degree(index, num_nodes, dtype):
    return torch.zeros(num_nodes, dtype=dtype).index_add(0, index, torch.ones(index.numel(), dtype=dtype))


class GCNConv(nn.Module):
    def __init__(self, in_channels, out_channels, aggr="max"):
        super().__init__()
        self.aggr = aggr
        self.lin = nn.Linear(in_channels, out_channels, bias=False)
        self.bias = nn.Parameter(torch.randn(out_channels) * 0.1)

    def propagate(self, edge_index, x, norm):
        row, col = edge_index
        msg = norm.view(-1, 1) * x[row]
        out = torch.full((x.size(0), x.size(1)), float("-inf"))
        idx = col.view(-1, 1).expand_as(msg)
        return out.scatter_reduce(0, idx, msg, reduce="amax", include_self=True)

    def forward(self, x, edge_index):
        edge_index = add_self_loops(edge_index, num_nodes=x.size(0))
        x = self.lin(x)
        row, col = edge_index
        deg = degree(col, x.size(0), dtype=x.dtype)
        deg_inv_sqrt = deg.pow(-0.5)
        norm = deg_inv_sqrt[row] * deg_inv_sqrt[col]
        out = self.propagate(edge_index, x=x, norm=norm)
        out += self.bias  # bench: bug
        return out


conv = GCNConv(4, 8)
x = torch.randn(6, 4)
edge_index = torch.tensor([[0, 1, 2, 3, 4, 5, 0, 2], [1, 2, 3, 4, 5, 0, 3, 5]])
y = torch.randn(6, 8)
loss = ((conv(x, edge_index) - y) ** 2).mean()
loss.backward()
print("loss", round(loss.item(), 4))
print("lin grad", round(conv.lin.weight.grad.norm().item(), 4))
g = conv.bias.grad
print("bias grad", None if g is None else round(g.norm().item(), 4))
