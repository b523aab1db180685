"""The MuRel pairwise module detaches the gathered region-pair features in place, so the pairwise relation loss never reaches the fusion layer that produced the region features.

source: https://github.com/Cadene/murel.bootstrap.pytorch/issues/7
symptom: silent
rule: ?
shape: VQA MuRel cell (question-region fusion, then a Pairwise nn.Module gathering all region pairs by advanced indexing, max aggregation, residual), classifier, Adam training loop over several steps
wrong: detach
why: replacing the in-place detach_ by `detach().requires_grad_(True)` makes a new leaf, so the pair features still do not backpropagate into the question-region fusion.
"""
import itertools

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


def make_pairs_ids(n_regions, bsize):
    pairs_ids = []
    for batch_id in range(bsize):
        pairs_id = torch.tensor(
            [(batch_id, i, j) for i, j in itertools.product(range(n_regions), repeat=2)],
            requires_grad=False,
            dtype=torch.long,
        )
        pairs_ids.append(pairs_id)
    return torch.cat(pairs_ids).contiguous()


class PairFusion(nn.Module):
    def __init__(self, dim_in, dim_out):
        super().__init__()
        self.lin = nn.Linear(2 * dim_in, dim_out)

    def forward(self, xs):
        return torch.relu(self.lin(torch.cat(xs, dim=1)))


class Pairwise(nn.Module):
    def __init__(self, dim, dim_coord=4, residual=True):
        super().__init__()
        self.residual = residual
        self.f_coord_module = PairFusion(dim_coord, dim)
        self.f_feat_module = PairFusion(dim, dim)
        self.pairs_ids = None

    def forward(self, mm, coords):
        bsize = mm.shape[0]
        n_regions = mm.shape[1]
        if self.pairs_ids is None:
            self.pairs_ids = make_pairs_ids(n_regions, bsize)

        Rij = 0
        pair_coords = coords[self.pairs_ids[:, 0][:, None], self.pairs_ids[:, 1:]]
        pair_coords.detach_()  # REALLY IMPORTANT
        Rij += self.f_coord_module([pair_coords[:, 0, :], pair_coords[:, 1, :]])
        pair_mm = mm[self.pairs_ids[:, 0][:, None], self.pairs_ids[:, 1:]]
        pair_mm = pair_mm.detach().requires_grad_(True)
        Rij += self.f_feat_module([pair_mm[:, 0, :], pair_mm[:, 1, :]])

        Rij = Rij.view(bsize, n_regions, n_regions, -1)
        mm_new, argmax = Rij.max(2)
        if self.residual:
            mm_new += mm
        return mm_new


class MuRelCell(nn.Module):
    def __init__(self, dim_q, dim_v, dim):
        super().__init__()
        self.fusion = nn.Linear(dim_q + dim_v, dim)
        self.pairwise = Pairwise(dim)

    def forward(self, q, v, coords):
        n_regions = v.shape[1]
        q_exp = q[:, None, :].expand(-1, n_regions, -1)
        mm = torch.relu(self.fusion(torch.cat([q_exp, v], dim=2)))
        return self.pairwise(mm, coords)


cell = MuRelCell(dim_q=6, dim_v=8, dim=8)
classif = nn.Linear(8, 3)
params = list(cell.parameters()) + list(classif.parameters())
opt = torch.optim.Adam(params, lr=0.01)

bsize, n_regions = 4, 5
q = torch.randn(bsize, 6)
v = torch.randn(bsize, n_regions, 8)
coords = torch.rand(bsize, n_regions, 4)
labels = torch.tensor([0, 1, 2, 1])
for step in range(10):
    opt.zero_grad()
    out = cell(q, v, coords).max(1)[0]
    loss = F.cross_entropy(classif(out), labels)
    loss.backward()
    if step == 0:
        first_grad = cell.fusion.weight.grad.norm().item()
    opt.step()
print("loss", round(loss.item(), 4))
print("fusion_grad_step0", round(first_grad, 4))
print("fusion_w_norm", round(cell.fusion.weight.norm().item(), 4))
