"""NormActivation clamps the norm with epsilon only after the square root, so a feature vector of norm zero still sends 0 * inf = nan back through sqrt.

source: https://github.com/e3nn/e3nn/pull/258
symptom: nan-grad
rule: ?
shape: equivariant network nn.Module: Norm submodule (sqrt of summed squares) used by a NormActivation module after an equivariant linear layer; a padded sample has all-zero vectors
wrong: no-grad
why: computing the norms under torch.no_grad() removes the nan but treats the gate sigmoid(|x|) as a constant, so every gradient through the activation loses the term that comes from the norm.
"""
import torch
import torch.nn as nn

torch.manual_seed(0)


class Norm(nn.Module):
    def __init__(self, squared=False):
        super().__init__()
        self.squared = squared

    def forward(self, features):  # [batch, mul, 3] -> [batch, mul]
        sq = features.pow(2).sum(-1)
        return sq if self.squared else sq.sqrt()


class NormActivation(nn.Module):
    def __init__(self, scalar_nonlinearity, normalize=True, epsilon=1e-8):
        super().__init__()
        self.scalar_nonlinearity = scalar_nonlinearity
        self.normalize = normalize
        self.epsilon = epsilon
        self.norm = Norm()

    def forward(self, features):
        with torch.no_grad():
            norms = self.norm(features)
        norms = norms.clamp(min=self.epsilon)
        scalings = self.scalar_nonlinearity(norms)
        if self.normalize:
            scalings = scalings / norms
        return features * scalings[..., None]


class EquivariantLinear(nn.Module):
    def __init__(self, mul_in, mul_out):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(mul_in, mul_out) / mul_in ** 0.5)

    def forward(self, x):
        return torch.einsum("bis,io->bos", x, self.weight)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin1 = EquivariantLinear(2, 4)
        self.act = NormActivation(torch.sigmoid, normalize=False)
        self.lin2 = EquivariantLinear(4, 1)

    def forward(self, x):
        return self.lin2(self.act(self.lin1(x)))


model = Net()
x = torch.randn(3, 2, 3)
x[2] = 0.0  # padded node: zero vectors
target = torch.randn(3, 1, 3)
loss = (model(x) - target).pow(2).mean()
loss.backward()
print("loss", round(loss.item(), 4))
print("lin1_grad_norm", round(model.lin1.weight.grad.norm().item(), 4))
print("lin2_grad_norm", round(model.lin2.weight.grad.norm().item(), 4))
