"""The SAC trainer steps the two Q-function optimizers before calling policy_loss.backward(), but the policy loss was computed through the Q networks, whose weights the optimizer steps have just modified in place, so the policy backward raises.

source: https://github.com/rail-berkeley/rlkit/pull/109
symptom: error
rule: ?
shape: SAC trainer class (tanh-Gaussian policy, twin Q networks with target copies, automatic entropy tuning), several Adam optimizers updated in sequence, soft target updates, several training steps on synthetic batches
"""
import numpy as np
import torch
import torch.optim as optim
from torch import nn as nn

torch.manual_seed(0)


class Mlp(nn.Module):
    def __init__(self, in_dim, out_dim):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(in_dim, 32), nn.ReLU(), nn.Linear(32, out_dim))

    def forward(self, *inputs):
        return self.net(torch.cat(inputs, dim=1))


class TanhGaussianPolicy(nn.Module):
    def __init__(self, obs_dim, action_dim):
        super().__init__()
        self.net = Mlp(obs_dim, 2 * action_dim)

    def forward(self, obs, reparameterize=True, return_log_prob=True):
        mean, log_std = self.net(obs).chunk(2, dim=1)
        log_std = log_std.clamp(-5, 2)
        std = log_std.exp()
        pre_tanh = mean + std * torch.randn_like(mean)
        action = torch.tanh(pre_tanh)
        log_prob = (-0.5 * ((pre_tanh - mean) / std) ** 2 - log_std - 0.5 * np.log(2 * np.pi)).sum(1, keepdim=True)
        log_prob = log_prob - torch.log(1 - action ** 2 + 1e-6).sum(1, keepdim=True)
        return action, mean, log_std, log_prob


def soft_update_from_to(source, target, tau):
    for target_param, param in zip(target.parameters(), source.parameters()):
        target_param.data.copy_(target_param.data * (1.0 - tau) + param.data * tau)


class SACTrainer:
    def __init__(self, action_dim, policy, qf1, qf2, target_qf1, target_qf2, discount=0.99,
                 reward_scale=1.0, policy_lr=1e-3, qf_lr=1e-3, optimizer_class=optim.Adam,
                 soft_target_tau=1e-2):
        self.policy, self.qf1, self.qf2 = policy, qf1, qf2
        self.target_qf1, self.target_qf2 = target_qf1, target_qf2
        self.soft_target_tau = soft_target_tau
        self.target_entropy = -float(action_dim)
        self.log_alpha = torch.zeros(1, requires_grad=True)
        self.alpha_optimizer = optimizer_class([self.log_alpha], lr=policy_lr)
        self.qf_criterion = nn.MSELoss()
        self.policy_optimizer = optimizer_class(self.policy.parameters(), lr=policy_lr)
        self.qf1_optimizer = optimizer_class(self.qf1.parameters(), lr=qf_lr)
        self.qf2_optimizer = optimizer_class(self.qf2.parameters(), lr=qf_lr)
        self.discount = discount
        self.reward_scale = reward_scale

    def train_from_torch(self, batch):
        rewards = batch['rewards']
        terminals = batch['terminals']
        obs = batch['observations']
        actions = batch['actions']
        next_obs = batch['next_observations']

        """
        Policy and Alpha Loss
        """
        new_obs_actions, policy_mean, policy_log_std, log_pi = self.policy(
            obs, reparameterize=True, return_log_prob=True,
        )
        alpha_loss = -(self.log_alpha * (log_pi + self.target_entropy).detach()).mean()
        self.alpha_optimizer.zero_grad()
        alpha_loss.backward()
        self.alpha_optimizer.step()
        alpha = self.log_alpha.exp()

        q_new_actions = torch.min(
            self.qf1(obs, new_obs_actions),
            self.qf2(obs, new_obs_actions),
        )
        policy_loss = (alpha * log_pi - q_new_actions).mean()

        """
        QF Loss
        """
        q1_pred = self.qf1(obs, actions)
        q2_pred = self.qf2(obs, actions)
        new_next_actions, _, _, new_log_pi = self.policy(
            next_obs, reparameterize=True, return_log_prob=True,
        )
        target_q_values = torch.min(
            self.target_qf1(next_obs, new_next_actions),
            self.target_qf2(next_obs, new_next_actions),
        ) - alpha * new_log_pi

        q_target = self.reward_scale * rewards + (1. - terminals) * self.discount * target_q_values
        qf1_loss = self.qf_criterion(q1_pred, q_target.detach())
        qf2_loss = self.qf_criterion(q2_pred, q_target.detach())

        """
        Update networks
        """
        self.policy_optimizer.zero_grad()
        policy_loss.backward()
        self.policy_optimizer.step()

        self.qf1_optimizer.zero_grad()
        qf1_loss.backward()
        self.qf1_optimizer.step()

        self.qf2_optimizer.zero_grad()
        qf2_loss.backward()
        self.qf2_optimizer.step()

        """
        Soft Updates
        """
        soft_update_from_to(self.qf1, self.target_qf1, self.soft_target_tau)
        soft_update_from_to(self.qf2, self.target_qf2, self.soft_target_tau)
        return policy_loss, qf1_loss


obs_dim, action_dim = 6, 2
policy = TanhGaussianPolicy(obs_dim, action_dim)
qf1, qf2 = Mlp(obs_dim + action_dim, 1), Mlp(obs_dim + action_dim, 1)
target_qf1, target_qf2 = Mlp(obs_dim + action_dim, 1), Mlp(obs_dim + action_dim, 1)
target_qf1.load_state_dict(qf1.state_dict())
target_qf2.load_state_dict(qf2.state_dict())
trainer = SACTrainer(action_dim, policy, qf1, qf2, target_qf1, target_qf2)

w0 = policy.net.net[0].weight.detach().clone()
for step in range(30):
    obs = torch.randn(64, obs_dim)
    actions = torch.rand(64, action_dim) * 2 - 1
    batch = {
        'observations': obs,
        'actions': actions,
        'rewards': -(actions - obs[:, :action_dim].tanh()).pow(2).sum(1, keepdim=True),
        'terminals': torch.zeros(64, 1),
        'next_observations': obs + 0.1 * torch.randn(64, obs_dim),
    }
    policy_loss, qf1_loss = trainer.train_from_torch(batch)
print("policy_loss", round(policy_loss.item(), 4))
print("qf1_loss", round(qf1_loss.item(), 4))
print("policy_drift", round((policy.net.net[0].weight - w0).norm().item(), 4))
