"""The torch backend's asarray wraps the forecast with torch.asarray (requires_grad defaulted to False in the torch versions of the report), which returns a tensor cut from the graph, so the CRPS loss cannot be backpropagated.

source: https://github.com/frazane/scoringrules/issues/36
symptom: error
rule: ?
shape: function through an array-backend abstraction (backend object with asarray/sort/mean) used as the loss of an ensemble-forecast network, Adam training loop
"""
import torch
import torch.nn as nn

torch.manual_seed(0)


class TorchBackend:
    """Torch backend."""

    name = "torch"

    def asarray(self, obj, /, *, dtype=None):
        # requires_grad=False was torch.asarray's default when the issue was filed
        return torch.asarray(obj, dtype=dtype, requires_grad=False)  # bench: bug

    def sort(self, x, /, *, axis=-1):
        return torch.sort(x, dim=axis)[0]

    def mean(self, x, /, *, axis=None, keepdims=False):
        return torch.mean(x, dim=axis, keepdim=keepdims)

    def abs(self, x):
        return torch.abs(x)

    def expand_dims(self, x, /, axis=0):
        return torch.unsqueeze(x, dim=axis)


backends = {"torch": TorchBackend()}


def _crps_ensemble_nrg(obs, fct, backend):
    B = backends[backend]
    M = fct.shape[-1]
    e_1 = B.mean(B.abs(B.expand_dims(obs, -1) - fct), axis=-1)
    e_2 = B.mean(B.abs(B.expand_dims(fct, -1) - B.expand_dims(fct, -2)).reshape(*fct.shape[:-1], M * M), axis=-1)
    return e_1 - 0.5 * e_2


def crps_ensemble(observations, forecasts, /, axis=-1, *, sorted_ensemble=False, estimator="nrg", backend="torch"):
    B = backends[backend]
    observations, forecasts = map(B.asarray, (observations, forecasts))
    if not sorted_ensemble and estimator not in ["nrg", "akr", "akr_circperm", "fair"]:
        forecasts = B.sort(forecasts, axis=-1)
    return _crps_ensemble_nrg(observations, forecasts, backend)


class EnsembleForecaster(nn.Module):
    def __init__(self, n_features=5, n_members=8):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(n_features, 16), nn.ReLU())
        self.members = nn.Linear(16, n_members)

    def forward(self, x):
        return self.members(self.body(x))


model = EnsembleForecaster()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
x = torch.randn(64, 5)
obs = x[:, 0] * 2.0 + 0.3 * torch.randn(64)

for step in range(5):
    optimizer.zero_grad()
    fct = model(x)
    loss = crps_ensemble(obs, fct).mean()
    loss.backward()
    optimizer.step()

g = model.members.weight.grad
print("loss", round(loss.item(), 4))
print("members grad norm", None if g is None else round(g.norm().item(), 4))
print("members weight norm", round(model.members.weight.norm().item(), 4))
