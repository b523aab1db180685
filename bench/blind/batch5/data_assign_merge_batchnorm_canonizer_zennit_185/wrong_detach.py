"""MergeBatchNorm folds the batch norm into the preceding linear layer by writing the merged values into weight.data / bias.data and resetting the batch-norm parameters through .data, so gradients taken through the canonized model are gradients of the merged copies, not of the original linear and batch-norm parameters.

source: https://github.com/chr5tphr/zennit/pull/185
symptom: silent
rule: ?
shape: attribution library canonizer (register/merge/remove that rewrites a Linear and the following BatchNorm) applied to a small classifier, gradient of the class score with respect to the parameters
wrong: detach
why: keeps the originals for remove() but installs the merged weight and bias as new nn.Parameters, which are leaves: the gradient lands on these temporary copies and the original linear and batch-norm parameters keep .grad None
"""
import torch
from torch import nn

torch.manual_seed(0)


class MergeBatchNorm:
    def register(self, linears, batch_norm):
        self.linears = linears
        self.batch_norm = batch_norm
        self.linear_params = [(linear.weight, linear.bias) for linear in linears]
        self.batch_norm_params = {
            key: getattr(self.batch_norm, key) for key in ("weight", "bias", "running_mean", "running_var", "eps")
        }
        self.merge_batch_norm(self.linears, self.batch_norm)

    def remove(self):
        for linear, (weight, bias) in zip(self.linears, self.linear_params):
            object.__setattr__(linear, "weight", weight)
            object.__setattr__(linear, "bias", bias)
        for key, value in self.batch_norm_params.items():
            object.__setattr__(self.batch_norm, key, value)

    @staticmethod
    def merge_batch_norm(modules, batch_norm):
        denominator = (batch_norm.running_var + batch_norm.eps) ** .5
        scale = batch_norm.weight / denominator
        for module in modules:
            index = (slice(None), *((None,) * (module.weight.ndim - 1)))
            # merge batch_norm into linear layer
            module.weight = nn.Parameter(module.weight * scale[index])
            module.bias = nn.Parameter((module.bias - batch_norm.running_mean) * scale + batch_norm.bias)
        # change batch_norm parameters to produce identity
        for key, func in zip(
            ("running_mean", "running_var", "bias", "weight", "eps"),
            (*(torch.zeros_like, torch.ones_like) * 2, lambda _: 0.)
        ):
            object.__setattr__(batch_norm, key, func(getattr(batch_norm, key)))

model = nn.Sequential(nn.Linear(6, 5), nn.BatchNorm1d(5), nn.ReLU(), nn.Linear(5, 3))
with torch.no_grad():
    model[1].running_mean.uniform_(-0.5, 0.5)
    model[1].running_var.uniform_(0.5, 2.0)
    model[1].weight.uniform_(0.5, 1.5)
    model[1].bias.uniform_(-0.2, 0.2)
model.eval()
x = torch.randn(4, 6)

canonizer = MergeBatchNorm()
canonizer.register([model[0]], model[1])
score = model(x)[:, 1].sum()
score.backward()
canonizer.remove()
print("score", round(score.item(), 4))


def gnorm(p):
    return None if p.grad is None else round(p.grad.norm().item(), 4)


print("grad linear0 weight", gnorm(model[0].weight))
print("grad batchnorm weight", gnorm(model[1].weight))
