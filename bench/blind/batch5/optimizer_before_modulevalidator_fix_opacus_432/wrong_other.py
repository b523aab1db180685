"""The DP training script passes model.parameters() to the optimizer and only then calls ModuleValidator.fix(model), which returns a fixed copy of the model (BatchNorm replaced by GroupNorm); the optimizer keeps stepping the old model's parameters, so the model that is trained never changes.

source: https://github.com/meta-pytorch/opacus/issues/432
symptom: no-training
rule: ?
shape: training script: small CNN with BatchNorm, a validator that clones the model and swaps BatchNorm for GroupNorm, SGD loop over a few steps
wrong: other
why: swaps the BatchNorms for GroupNorms in place so the early optimizer keeps the conv and linear parameters, but the new GroupNorm weights and biases are not in it and never train
"""
import copy
import math
import torch
from torch import nn

torch.manual_seed(0)


class ModuleValidator:
    """Stand-in for opacus.validators.ModuleValidator.fix: returns a fixed clone."""

    @staticmethod
    def fix(module):
        module = copy.deepcopy(module)
        ModuleValidator._replace(module)
        return module

    @staticmethod
    def _replace(module):
        for name, child in module.named_children():
            if isinstance(child, nn.BatchNorm2d):
                setattr(module, name, nn.GroupNorm(math.gcd(32, child.num_features), child.num_features,
                                                   affine=child.affine))
            else:
                ModuleValidator._replace(child)


model = nn.Sequential(
    nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
    nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
    nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4),
)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
ModuleValidator._replace(model)  # fix in place, keep the optimizer's parameters
criterion = nn.CrossEntropyLoss()
x = torch.randn(16, 3, 8, 8)
y = torch.randint(0, 4, (16,))
w0 = model[0].weight.detach().clone()
for step in range(5):
    optimizer.zero_grad()
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
print("loss", round(loss.item(), 4))
print("conv0 weight change", round((model[0].weight - w0).norm().item(), 4))
print("groupnorm1 weight change", round((model[1].weight - 1).norm().item(), 4))
