"""LookSAM normalises each parameter's gradient by its norm without an epsilon, so a parameter whose gradient is exactly zero gets 0/0 = nan in its gradient and the step writes nan weights.

source: https://github.com/rollovd/LookSAM/issues/1
symptom: nan-grad
rule: ?
shape: optimizer library class (LookSAM wrapping SGD): SAM perturbation every k steps, gradient decomposition with per-parameter normalisation
"""
import torch
import torch.nn as nn

torch.manual_seed(0)


class LookSAM(torch.optim.Optimizer):
    def __init__(self, k, alpha, model, base_optimizer, criterion, rho=0.05, **kwargs):
        defaults = dict(alpha=alpha, rho=rho, **kwargs)
        self.model = model
        super().__init__(self.model.parameters(), defaults)
        self.k = k
        self.alpha = torch.tensor(alpha)
        self.criterion = criterion
        self.base_optimizer = base_optimizer(self.param_groups, **kwargs)
        self.param_groups = self.base_optimizer.param_groups

    @staticmethod
    def normalized(g):
        return g / g.norm(p=2)  # bench: bug

    def _grad_norm(self):
        return torch.norm(torch.stack([p.grad.norm(p=2) for g in self.param_groups for p in g["params"] if p.grad is not None]), p=2)

    def step(self, t, samples, targets):
        group = self.param_groups[0]
        if not t % self.k:
            scale = group["rho"] / (self._grad_norm() + 1e-8)
            for i, p in enumerate(group["params"]):
                if p.grad is None:
                    continue
                self.state[p]["old_p"] = p.data.clone()
                self.state[f"old_grad_p_{i}"]["old_grad_p"] = p.grad.clone()
                with torch.no_grad():
                    p.add_(p.grad * scale)
            self.zero_grad(set_to_none=False)
            self.criterion(self.model(samples), targets).backward()
        for i, p in enumerate(group["params"]):
            if p.grad is None:
                continue
            if not t % self.k:
                g_grad_norm = LookSAM.normalized(self.state[f"old_grad_p_{i}"]["old_grad_p"])
                g_s_grad_norm = LookSAM.normalized(p.grad)
                self.state[f"gv_{i}"]["gv"] = p.grad - p.grad.norm(p=2) * torch.sum(g_grad_norm * g_s_grad_norm) * g_grad_norm
                p.data = self.state[p]["old_p"]
            else:
                with torch.no_grad():
                    gv = self.state[f"gv_{i}"]["gv"]
                    p.grad.add_(self.alpha * (p.grad.norm(p=2) / (gv.norm(p=2) + 1e-8) * gv))
        self.base_optimizer.step()
        self.zero_grad(set_to_none=False)


# the first layer's ReLU units are all inactive on this batch, so its gradients are exactly zero
model = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 1), nn.Tanh(), nn.Linear(1, 1))
with torch.no_grad():
    model[0].bias.fill_(-10.0)
    model[0].weight.mul_(0.01)
criterion = nn.MSELoss()
opt = LookSAM(k=2, alpha=0.7, model=model, base_optimizer=torch.optim.SGD, criterion=criterion, rho=0.05, lr=0.1)
x, y = torch.randn(16, 4), torch.randn(16, 1)
for t in range(4):
    loss = criterion(model(x), y)
    loss.backward()
    opt.step(t=t, samples=x, targets=y)
print("loss", round(loss.item(), 4))
print("last weight", round(model[4].weight.item(), 4))
print("first weight norm", round(model[0].weight.norm().item(), 4))
