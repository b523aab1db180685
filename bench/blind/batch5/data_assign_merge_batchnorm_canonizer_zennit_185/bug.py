"""MergeBatchNorm folds the batch norm into the preceding linear layer by writing the merged values into weight.data / bias.data and resetting the batch-norm parameters through .data, so gradients taken through the canonized model are gradients of the merged copies, not of the original linear and batch-norm parameters.

source: https://github.com/chr5tphr/zennit/pull/185
symptom: silent
rule: ?
shape: attribution library canonizer (register/merge/remove that rewrites a Linear and the following BatchNorm) applied to a small classifier, gradient of the class score with respect to the parameters
"""
import torch
from torch import nn

torch.manual_seed(0)


class MergeBatchNorm:
    def register(self, linears, batch_norm):  # bench: bug
        self.linears = linears
        self.batch_norm = batch_norm
        self.linear_params = [(linear.weight.data, getattr(linear.bias, "data", None)) for linear in linears]
        self.batch_norm_params = {
            key: getattr(self.batch_norm, key).data for key in ("weight", "bias", "running_mean", "running_var")
        }
        self.merge_batch_norm(self.linears, self.batch_norm)

    def remove(self):
        for linear, (weight, bias) in zip(self.linears, self.linear_params):
            linear.weight.data = weight
            linear.bias.data = bias
        for key, value in self.batch_norm_params.items():
            getattr(self.batch_norm, key).data = value

    @staticmethod
    def merge_batch_norm(modules, batch_norm):
        denominator = (batch_norm.running_var + batch_norm.eps) ** .5
        scale = batch_norm.weight / denominator
        for module in modules:
            original_weight = module.weight.data
            original_bias = module.bias.data
            index = (slice(None), *((None,) * (original_weight.ndim - 1)))
            module.weight.data = original_weight * scale[index]
            module.bias.data = (original_bias - batch_norm.running_mean) * scale + batch_norm.bias
        batch_norm.running_mean.data = torch.zeros_like(batch_norm.running_mean.data)
        batch_norm.running_var.data = torch.ones_like(batch_norm.running_var.data)
        batch_norm.bias.data = torch.zeros_like(batch_norm.bias.data)
        batch_norm.weight.data = torch.ones_like(batch_norm.weight.data)


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
