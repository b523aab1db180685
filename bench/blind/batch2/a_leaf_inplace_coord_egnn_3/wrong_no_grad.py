"""The equivariant graph layer updates the coordinates with `coord += agg`, which writes into the caller's coordinate tensor; when the coordinates are a leaf that requires grad (to get forces as -dE/dx) the first layer fails.

source: https://github.com/vgsatorras/egnn/issues/3 (fix commit 92b7cd1)
symptom: error
rule: ?
shape: graph network of nn.Module layers (edge, node and coordinate models in one class, an EGNN stack), energy and force loss via torch.autograd.grad(create_graph=True), Adam training loop
wrong: no-grad
why: updating the coordinates under no_grad silences the error but the coordinate messages leave the graph, so forces and parameter gradients lose the coordinate-update path (and the caller's positions are overwritten).
"""

import torch
from torch import nn

torch.manual_seed(0)


def unsorted_segment_sum(data, segment_ids, num_segments):
    result = data.new_full((num_segments, data.size(1)), 0)
    segment_ids = segment_ids.unsqueeze(-1).expand(-1, data.size(1))
    result.scatter_add_(0, segment_ids, data)
    return result


def unsorted_segment_mean(data, segment_ids, num_segments):
    segment_ids = segment_ids.unsqueeze(-1).expand(-1, data.size(1))
    result = data.new_full((num_segments, data.size(1)), 0)
    count = data.new_full((num_segments, data.size(1)), 0)
    result.scatter_add_(0, segment_ids, data)
    count.scatter_add_(0, segment_ids, torch.ones_like(data))
    return result / count.clamp(min=1)


class E_GCL(nn.Module):
    def __init__(self, input_nf, output_nf, hidden_nf, act_fn=nn.SiLU()):
        super().__init__()
        self.edge_mlp = nn.Sequential(nn.Linear(input_nf * 2 + 1, hidden_nf), act_fn, nn.Linear(hidden_nf, hidden_nf), act_fn)
        self.node_mlp = nn.Sequential(nn.Linear(hidden_nf + input_nf, hidden_nf), act_fn, nn.Linear(hidden_nf, output_nf))
        layer = nn.Linear(hidden_nf, 1, bias=False)
        torch.nn.init.xavier_uniform_(layer.weight, gain=0.1)
        self.coord_mlp = nn.Sequential(nn.Linear(hidden_nf, hidden_nf), act_fn, layer)

    def edge_model(self, source, target, radial):
        return self.edge_mlp(torch.cat([source, target, radial], dim=1))

    def node_model(self, x, edge_index, edge_attr):
        row, col = edge_index
        agg = unsorted_segment_sum(edge_attr, row, num_segments=x.size(0))
        out = self.node_mlp(torch.cat([x, agg], dim=1))
        return x + out

    def coord_model(self, coord, edge_index, coord_diff, edge_feat):
        row, col = edge_index
        trans = coord_diff * self.coord_mlp(edge_feat)
        agg = unsorted_segment_mean(trans, row, num_segments=coord.size(0))
        with torch.no_grad():
            coord += agg
        return coord

    def coord2radial(self, edge_index, coord):
        row, col = edge_index
        coord_diff = coord[row] - coord[col]
        radial = torch.sum(coord_diff**2, 1).unsqueeze(1)
        return radial, coord_diff

    def forward(self, h, edge_index, coord):
        row, col = edge_index
        radial, coord_diff = self.coord2radial(edge_index, coord)
        edge_feat = self.edge_model(h[row], h[col], radial)
        coord = self.coord_model(coord, edge_index, coord_diff, edge_feat)
        h = self.node_model(h, edge_index, edge_feat)
        return h, coord


class EGNN(nn.Module):
    def __init__(self, in_node_nf, hidden_nf, out_node_nf, n_layers=2):
        super().__init__()
        self.n_layers = n_layers
        self.embedding_in = nn.Linear(in_node_nf, hidden_nf)
        self.embedding_out = nn.Linear(hidden_nf, out_node_nf)
        for i in range(n_layers):
            self.add_module("gcl_%d" % i, E_GCL(hidden_nf, hidden_nf, hidden_nf))

    def forward(self, h, x, edges):
        h = self.embedding_in(h)
        for i in range(self.n_layers):
            h, x = self._modules["gcl_%d" % i](h, edges, x)
        return self.embedding_out(h), x


def get_edges(n_nodes):
    rows, cols = zip(*[(i, j) for i in range(n_nodes) for j in range(n_nodes) if i != j])
    return [torch.tensor(rows), torch.tensor(cols)]


n_nodes = 5
edges = get_edges(n_nodes)
model = EGNN(in_node_nf=1, hidden_nf=16, out_node_nf=1)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
h0 = torch.ones(n_nodes, 1)
positions = torch.randn(n_nodes, 3)
energy_ref = torch.tensor(-1.5)
forces_ref = 0.1 * torch.randn(n_nodes, 3)

for step in range(3):
    opt.zero_grad()
    x = positions.clone().requires_grad_(True)
    node_energy, _ = model(h0, x, edges)
    energy = node_energy.sum()
    forces = -torch.autograd.grad(energy, x, create_graph=True)[0]
    loss = (energy - energy_ref) ** 2 + ((forces - forces_ref) ** 2).mean()
    loss.backward()
    opt.step()



def grad_norm(p):
    return None if p.grad is None else round(p.grad.norm().item(), 4)


print("loss", round(loss.item(), 4))
print("force norm", round(forces.norm().item(), 4))
print("coord_mlp grad norm", grad_norm(model.gcl_0.coord_mlp[0].weight))
print("edge_mlp grad norm", grad_norm(model.gcl_1.edge_mlp[0].weight))
