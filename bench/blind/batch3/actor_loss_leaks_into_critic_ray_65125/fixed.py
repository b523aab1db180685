"""The TQC learner computes the actor-loss Q-values through the online critics without freezing the critic parameters; its per-optimizer backward passes then accumulate the actor loss's critic gradients into the critic gradients, and the critic optimizer applies them.

source: https://github.com/ray-project/ray/pull/65125
symptom: silent
rule: ?
shape: RL learner class (policy and quantile-critic nn.Modules, one optimizer each, _forward_train building both losses, compute_gradients running one backward per optimizer in registration order, apply_gradients)
"""
import torch
import torch.nn as nn

torch.manual_seed(0)


class Policy(nn.Module):
    def __init__(self, obs_dim, act_dim):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(obs_dim, 16), nn.ReLU(), nn.Linear(16, 2 * act_dim))

    def forward(self, obs):
        mean, log_std = self.net(obs).chunk(2, -1)
        dist = torch.distributions.Normal(mean, log_std.clamp(-5, 2).exp())
        u = dist.rsample()
        action = torch.tanh(u)
        logp = (dist.log_prob(u) - torch.log(1 - action.pow(2) + 1e-6)).sum(-1)
        return action, logp


class QuantileCritic(nn.Module):
    def __init__(self, obs_dim, act_dim, n_quantiles=5):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(obs_dim + act_dim, 16), nn.ReLU(), nn.Linear(16, n_quantiles))

    def forward(self, obs, act):
        return self.net(torch.cat([obs, act], -1))


class TQCLearner:
    def __init__(self, obs_dim=3, act_dim=2):
        self.pi = Policy(obs_dim, act_dim)
        self.qf = QuantileCritic(obs_dim, act_dim)
        self.optimizers = {"qf": torch.optim.Adam(self.qf.parameters(), lr=3e-3),
                           "policy": torch.optim.Adam(self.pi.parameters(), lr=3e-3)}
        self.alpha, self.gamma = 0.2, 0.99

    def _forward_train(self, batch):
        obs, act, rew, next_obs = batch
        action, logp = self.pi(obs)
        for p in self.qf.parameters():
            p.requires_grad_(False)
        qf_curr = self.qf(obs, action).mean(-1)
        for p in self.qf.parameters():
            p.requires_grad_(True)
        qf_pred = self.qf(obs, act)
        with torch.no_grad():
            next_action, next_logp = self.pi(next_obs)
            target = rew.unsqueeze(-1) + self.gamma * (self.qf(next_obs, next_action) - self.alpha * next_logp.unsqueeze(-1))
        qf_loss = (qf_pred - target).pow(2).mean()
        policy_loss = (self.alpha * logp - qf_curr).mean()
        return {"qf": qf_loss, "policy": policy_loss}

    def compute_gradients(self, losses):
        grads = {}
        for name, optim in self.optimizers.items():
            optim.zero_grad()
            losses[name].backward(retain_graph=True)
            for group in optim.param_groups:
                for p in group["params"]:
                    grads[p] = p.grad  # harvested by reference
        return grads

    def apply_gradients(self, grads):
        for optim in self.optimizers.values():
            optim.step()


learner = TQCLearner()
for it in range(3):
    batch = (torch.randn(8, 3), torch.rand(8, 2) * 2 - 1, torch.randn(8), torch.randn(8, 3))
    losses = learner._forward_train(batch)
    grads = learner.compute_gradients(losses)
    learner.apply_gradients(grads)

gq = torch.sqrt(sum((p.grad ** 2).sum() for p in learner.qf.parameters()))
gp = torch.sqrt(sum((p.grad ** 2).sum() for p in learner.pi.parameters()))
print("qf_loss", round(losses["qf"].item(), 4))
print("policy_loss", round(losses["policy"].item(), 4))
print("qf_grad", round(gq.item(), 4))
print("policy_grad", round(gp.item(), 4))
