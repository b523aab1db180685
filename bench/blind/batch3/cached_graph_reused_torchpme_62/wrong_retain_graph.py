"""The PME calculator caches the cell-dependent k-vectors and kernel from the first call and hands the cached tensors (still attached to the first call's graph) to later calls with an identical cell, so the second backward runs into the freed graph.

source: https://github.com/lab-cosmo/torch-pme/issues/62
symptom: error
rule: ?
shape: physics calculator nn.Module caching cell-derived tensors on self across forward calls; energy, backward to positions and cell called twice with fresh inputs
wrong: retain-graph
why: energy.backward(retain_graph=True) lets the second backward run through the first call's cached graph, so the k-space cell gradient of the second call is added to the first call's cell tensor and the second cell gets none of it.
"""
import torch
import torch.nn as nn

torch.manual_seed(0)


class PMEPotential(nn.Module):
    def __init__(self, smearing=1.0, n_k=3):
        super().__init__()
        self.smearing = smearing
        self.n_k = n_k
        self._cell_cache = None
        self._kvectors = None
        self._kernel = None

    def _compute_kvectors(self, cell):
        reciprocal = 2 * torch.pi * torch.linalg.inv(cell).T
        idx = torch.stack(torch.meshgrid(*[torch.arange(-self.n_k, self.n_k + 1.0)] * 3, indexing="ij"), -1).reshape(-1, 3)
        idx = idx[(idx != 0).any(-1)]
        kvectors = idx @ reciprocal
        k2 = (kvectors ** 2).sum(-1)
        kernel = 4 * torch.pi / k2 * torch.exp(-0.5 * self.smearing ** 2 * k2) / torch.det(cell)
        return kvectors, kernel

    def forward(self, positions, charges, cell):
        if self._cell_cache is None or not torch.equal(self._cell_cache, cell):
            self._kvectors, self._kernel = self._compute_kvectors(cell)
            self._cell_cache = cell.detach().clone()
        phase = positions @ self._kvectors.T
        s_re = (charges * torch.cos(phase)).sum(0)
        s_im = (charges * torch.sin(phase)).sum(0)
        return 0.5 * (self._kernel * (s_re ** 2 + s_im ** 2)).sum()


calculator = PMEPotential()
charges = torch.rand(6, 1)
for call in range(2):
    positions = (3 * torch.rand(6, 3)).requires_grad_(True)
    cell = (3 * torch.eye(3)).requires_grad_(True)
    energy = calculator(positions, charges, cell)
    energy.backward(retain_graph=True)

print("energy", round(energy.item(), 4))
print("force_norm", round(positions.grad.norm().item(), 4))
print("cell_grad", None if cell.grad is None else round(cell.grad.norm().item(), 4))
