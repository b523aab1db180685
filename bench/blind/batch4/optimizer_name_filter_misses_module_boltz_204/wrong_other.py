"""In confidence training, configure_optimizers keeps only parameters whose name contains "confidence_module", although out_token_feat_update (inside the structure module) runs with grad enabled and feeds the confidence head, so it is never updated.

source: https://github.com/jwohlwend/boltz/issues/204
symptom: no-training
rule: ?
shape: LightningModule-style model (trunk, structure module with an out_token_feat_update submodule, confidence module); configure_optimizers filters named_parameters by name; confidence-only training for three steps
wrong: other
why: switching requires_grad on for out_token_feat_update changes nothing (it already requires grad): its parameters are still filtered out of the optimizer, so they get gradients that are never applied.
"""
import torch
import torch.nn as nn

torch.manual_seed(0)


class AtomDiffusion(nn.Module):
    def __init__(self, d=16):
        super().__init__()
        self.score_model = nn.Linear(d, 3)
        self.out_token_feat_update = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, d))

    def forward(self, s):
        with torch.no_grad():
            coords = self.score_model(s)
        with torch.set_grad_enabled(True):
            token_rep = self.out_token_feat_update(s)
        return coords, token_rep


class Boltz1(nn.Module):
    def __init__(self, d=16, structure_prediction_training=False):
        super().__init__()
        self.structure_prediction_training = structure_prediction_training
        self.trunk = nn.Linear(8, d)
        self.structure_module = AtomDiffusion(d)
        self.confidence_module = nn.Sequential(nn.Linear(d + 3, d), nn.ReLU(), nn.Linear(d, 4))
        self.structure_module.out_token_feat_update.requires_grad_(True)

    def forward(self, feats):
        with torch.no_grad():
            s = self.trunk(feats)
        coords, token_rep = self.structure_module(s)
        return self.confidence_module(torch.cat([token_rep, coords], dim=-1))

    def configure_optimizers(self):
        if self.structure_prediction_training:
            names = [pn for pn, p in self.named_parameters() if p.requires_grad]
        else:
            names = [pn for pn, p in self.named_parameters() if p.requires_grad and "confidence_module" in pn]
        param_dict = dict(self.named_parameters())
        return torch.optim.Adam([param_dict[pn] for pn in names], lr=1e-2)


model = Boltz1()
opt = model.configure_optimizers()
feats, plddt_bins = torch.randn(10, 8), torch.randint(0, 4, (10,))
w0 = model.structure_module.out_token_feat_update[1].weight.detach().clone()
s0 = model.structure_module.score_model.weight.detach().clone()
for _ in range(3):
    opt.zero_grad()
    loss = nn.functional.cross_entropy(model(feats), plddt_bins)
    loss.backward()
    opt.step()
print("loss", round(nn.functional.cross_entropy(model(feats), plddt_bins).item(), 4))
print("out_token_feat_update change", round((model.structure_module.out_token_feat_update[1].weight - w0).norm().item(), 4))
print("score_model change", round((model.structure_module.score_model.weight - s0).norm().item(), 4))
