"""The angular symmetry functions divide by r_ij * r_ik for every padded triple (distance 0 for molecules with fewer atoms) and mask the result afterwards, so the forward is clean but the backward of 0/0 puts nan into the forces and the parameter gradients.

source: https://github.com/atomistic-machine-learning/schnetpack/pull/87
symptom: nan-grad
rule: ?
shape: atomistic model: neighbor-distance helper, BehlerAngular symmetry-function nn.Module with triple masks, element-wise energy network; force training (forces from autograd.grad with create_graph) on a padded batch of molecules of different sizes
"""
import torch
import torch.nn as nn

torch.manual_seed(0)


def neighbor_list(n_atoms):
    idx = torch.arange(n_atoms)
    return torch.stack([idx[idx != i] for i in range(n_atoms)])  # [A, A-1], no self pairs


def atom_distances(positions, neighbors, neighbor_mask):
    pos_j = positions[:, neighbors]  # [B, A, N, 3]
    rij = pos_j - positions[:, :, None, :]
    distances = rij.norm(dim=-1)
    tmp_distances = torch.zeros_like(distances)
    tmp_distances[neighbor_mask != 0] = distances[neighbor_mask != 0]
    return rij, tmp_distances


def cutoff(r, rc=4.0):
    return 0.5 * (torch.cos(r * torch.pi / rc) + 1.0) * (r < rc).float()


class BehlerAngular(nn.Module):
    def __init__(self, zetas=(1.0, 2.0), eta=0.5):
        super().__init__()
        self.zetas = zetas
        self.eta = eta

    def forward(self, rij, r, neighbor_mask):
        n = r.size(-1)
        triple_masks = neighbor_mask[..., :, None] * neighbor_mask[..., None, :] * (1 - torch.eye(n))
        r_ij, r_ik = r[..., :, None], r[..., None, :]
        dot = (rij[..., :, None, :] * rij[..., None, :, :]).sum(-1)
        denom = torch.where(triple_masks == 0, torch.ones_like(r_ij * r_ik), r_ij * r_ik)
        cos_theta = dot / denom
        radial = torch.exp(-self.eta * (r_ij ** 2 + r_ik ** 2)) * cutoff(r_ij) * cutoff(r_ik)
        out = []
        for zeta in self.zetas:
            angular_term = 2 ** (1 - zeta) * (1 + cos_theta) ** zeta * radial
            angular_term[triple_masks == 0] = 0.0  # filter out nan divisions via boolean mask
            out.append(angular_term.sum((-2, -1)))
        return torch.stack(out, -1)  # [B, A, n_sf]


class HDNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.sf = BehlerAngular()
        self.element_net = nn.Sequential(nn.Linear(2, 8), nn.Tanh(), nn.Linear(8, 1))

    def forward(self, positions, atom_mask):
        neighbors = neighbor_list(positions.size(1))
        neighbor_mask = atom_mask[:, :, None] * atom_mask[:, neighbors]
        rij, r = atom_distances(positions, neighbors, neighbor_mask)
        g = self.sf(rij, r, neighbor_mask)
        return (self.element_net(g).squeeze(-1) * atom_mask).sum(-1)


model = HDNN()
positions = torch.randn(2, 4, 3)
atom_mask = torch.tensor([[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 0.0]])  # second molecule has 3 atoms
positions[1, 3] = 0.0
positions.requires_grad_(True)
energy = model(positions, atom_mask)
forces = -torch.autograd.grad(energy.sum(), positions, create_graph=True)[0]
loss = (energy - torch.tensor([1.0, -1.0])).pow(2).mean() + forces.pow(2).mean()
loss.backward()
print("energy", [round(e, 4) for e in energy.tolist()])
print("force_norm", round(forces.norm().item(), 4))
print("param_grad", round(model.element_net[0].weight.grad.norm().item(), 4))
