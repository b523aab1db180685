"""Clamps in place the log-std half of `self.net(states).chunk(2, dim=-1)`, a multi-output view

source: https://github.com/toshikwa/gail-airl-ppo.pytorch/issues/13
symptom: error
rule: none
shape: nn.Module method of a policy network: `means, log_stds = self.net(states).chunk(2, dim=-1)` then `log_stds.clamp_(-20, 2)`
wrong: detach
why: clamps a detached copy of the log-stds, so no gradient reaches the log-std half of the network output
"""
import math

import torch
from torch import nn


def build_mlp(input_dim, output_dim, hidden_units=(64, 64), hidden_activation=nn.Tanh()):
    layers = []
    units = input_dim
    for next_units in hidden_units:
        layers.append(nn.Linear(units, next_units))
        layers.append(hidden_activation)
        units = next_units
    layers.append(nn.Linear(units, output_dim))
    return nn.Sequential(*layers)


def reparameterize(means, log_stds):
    noises = torch.randn_like(means)
    us = means + noises * log_stds.exp()
    actions = torch.tanh(us)
    log_pis = (-0.5 * noises.pow(2) - log_stds).sum(dim=-1, keepdim=True) - 0.5 * math.log(2 * math.pi) * log_stds.size(-1)
    log_pis -= torch.log(1 - actions.pow(2) + 1e-6).sum(dim=-1, keepdim=True)
    return actions, log_pis


class StateDependentPolicy(nn.Module):
    def __init__(self, state_shape, action_shape, hidden_units=(16, 16), hidden_activation=nn.ReLU(inplace=True)):
        super().__init__()
        self.net = build_mlp(
            input_dim=state_shape[0],
            output_dim=2 * action_shape[0],
            hidden_units=hidden_units,
            hidden_activation=hidden_activation
        )

    def sample(self, states):
        means, log_stds = self.net(states).chunk(2, dim=-1)
        return reparameterize(means, log_stds.detach().clamp(-20, 2))


torch.manual_seed(0)
actor = StateDependentPolicy((4,), (2,))
states = torch.randn(8, 4)
actions, log_pis = actor.sample(states)
loss = -log_pis.mean()
loss.backward()
print(round(loss.item(), 4), round(actor.net[0].weight.grad.norm().item(), 4))
