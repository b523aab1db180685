"""EvolveGCN-O evolves the GCN weight with a GRU and then re-wraps the result in a fresh nn.Parameter on the conv layer, which makes a new leaf and cuts the GRU and the initial weight out of the graph.

source: https://github.com/benedekrozemberczki/pytorch_geometric_temporal/issues/80
symptom: none-grad
rule: ?
shape: temporal graph nn.Module (EvolveGCNO: initial weight parameter, GRU submodule evolving it, GCN conv submodule whose weight is replaced in forward), node regression over snapshots
wrong: detach
why: copying the evolved weight into the existing parameter with .data keeps the conv weight a registered leaf that gets a gradient, but the copy is invisible to autograd, so the GRU and the initial weight still get no gradient and never learn.
"""
import torch
import torch.nn as nn

torch.manual_seed(0)


class GCNConv(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(in_channels, out_channels) * 0.3)

    def forward(self, x, adj, weight=None):
        w = self.weight if weight is None else weight
        deg = adj.sum(-1, keepdim=True)
        return (adj / deg) @ x @ w


class EvolveGCNO(nn.Module):
    def __init__(self, in_channels):
        super().__init__()
        self.initial_weight = nn.Parameter(torch.randn(1, in_channels, in_channels) * 0.3)
        self.recurrent_layer = nn.GRU(in_channels, in_channels, 1)
        self.conv_layer = GCNConv(in_channels, in_channels)
        self.weight = None

    def reset(self):
        self.weight = None

    def forward(self, X, adj):
        W = self.initial_weight if self.weight is None else self.weight
        _, self.weight = self.recurrent_layer(W, W)
        self.conv_layer.weight.data = self.weight.squeeze(dim=0)
        return self.conv_layer(X, adj)


class RecurrentGCN(nn.Module):
    def __init__(self, node_features):
        super().__init__()
        self.recurrent = EvolveGCNO(node_features)
        self.linear = nn.Linear(node_features, 1)

    def forward(self, x, adj):
        return self.linear(torch.relu(self.recurrent(x, adj)))


model = RecurrentGCN(4)
snapshots = [(torch.randn(5, 4), (torch.rand(5, 5) > 0.5).float() + torch.eye(5), torch.randn(5, 1)) for _ in range(3)]
model.recurrent.reset()
cost = 0
for x, adj, y in snapshots:
    y_hat = model(x, adj)
    cost = cost + torch.mean((y_hat - y) ** 2)
cost = cost / len(snapshots)
cost.backward()

gru_grad = model.recurrent.recurrent_layer.weight_hh_l0.grad
init_grad = model.recurrent.initial_weight.grad
print("cost", round(cost.item(), 4))
print("gru_grad", None if gru_grad is None else round(gru_grad.norm().item(), 4))
print("initial_weight_grad", None if init_grad is None else round(init_grad.norm().item(), 4))
print("linear_grad", round(model.linear.weight.grad.norm().item(), 4))
