"""A learnable TruncatedNormalDistribution registers the normal cdf of its bounds as buffers computed from the mu/sigma Parameters without detaching, so the buffers keep the constructor's graph and the second training step backpropagates through it again.

source: https://github.com/noegroup/bgflow/issues/14
symptom: error
rule: ?
shape: distribution module (Parameters mu/logsigma, buffers computed in __init__ from them, property Z used by log_prob) fitted by maximum likelihood for a few Adam steps
wrong: retain-graph
why: retain_graph=True keeps the constructor's graph alive, so every step adds the gradient of log Z at the initial mu/sigma (a stale quantity that should be a constant buffer) to the parameters' gradients.
"""
import torch

torch.manual_seed(0)


class TruncatedNormalDistribution(torch.nn.Module):
    def __init__(self, mu, sigma, lower_bound, upper_bound):
        super().__init__()
        self._mu = torch.nn.Parameter(mu)
        self._logsigma = torch.nn.Parameter(torch.log(sigma.to(mu)))
        self.register_buffer("_upper_bound", upper_bound.to(mu))
        self.register_buffer("_lower_bound", lower_bound.to(mu))
        self._standard_normal = torch.distributions.normal.Normal(torch.tensor(0.0), torch.tensor(1.0))
        alpha = (self._lower_bound - self._mu) / self._sigma
        beta = (self._upper_bound - self._mu) / self._sigma
        self.register_buffer("_cdf_lower_bound", self._standard_normal.cdf(alpha))
        self.register_buffer("_cdf_upper_bound", self._standard_normal.cdf(beta))

    @property
    def _sigma(self):
        return torch.exp(self._logsigma)

    @property
    def Z(self):
        return self._cdf_upper_bound - self._cdf_lower_bound

    def log_prob(self, x):
        return self._standard_normal.log_prob((x - self._mu) / self._sigma) - torch.log(self.Z * self._sigma)


dist = TruncatedNormalDistribution(torch.tensor([0.5, 1.0]), torch.tensor([1.0, 2.0]), torch.tensor(0.0), torch.tensor(4.0))
opt = torch.optim.Adam(dist.parameters(), lr=0.05)
data = torch.rand(64, 2) * 2.0
for step in range(3):
    opt.zero_grad()
    loss = -dist.log_prob(data).mean()
    loss.backward(retain_graph=True)
    opt.step()
print("loss", round(loss.item(), 4))
print("mu grad", round(dist._mu.grad.norm().item(), 4))
print("logsigma grad", round(dist._logsigma.grad.norm().item(), 4))
