"""IGA computes per-environment gradients with autograd.grad without create_graph=True, so the gradient-variance penalty is a constant for backward and its weight has no effect on training.

source: https://github.com/facebookresearch/DomainBed/issues/50
symptom: silent
rule: ?
shape: domain-generalisation algorithm class (IGA: featurizer + classifier network, per-environment losses, penalty on the spread of per-environment parameter gradients, Adam update)
"""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import autograd

torch.manual_seed(0)


class IGA:
    def __init__(self, penalty=10.0):
        self.network = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3))
        self.optimizer = torch.optim.Adam(self.network.parameters(), lr=1e-2)
        self.penalty = penalty

    def update(self, minibatches):
        total_loss = 0
        grads = []
        for x, y in minibatches:
            env_loss = F.cross_entropy(self.network(x), y)
            total_loss += env_loss
            env_grad = autograd.grad(env_loss, self.network.parameters(), retain_graph=True, create_graph=True)
            grads.append(env_grad)
        mean_loss = total_loss / len(minibatches)
        mean_grad = autograd.grad(mean_loss, self.network.parameters(), retain_graph=True, create_graph=True)
        penalty_value = 0
        for grad in grads:
            for g, mean_g in zip(grad, mean_grad):
                penalty_value += (g - mean_g).pow(2).sum()
        self.optimizer.zero_grad()
        (mean_loss + self.penalty * penalty_value).backward()
        self.optimizer.step()
        return mean_loss.item(), float(penalty_value)


alg = IGA()
envs = [(torch.randn(16, 5) + i, torch.randint(0, 3, (16,))) for i in range(3)]
for step in range(5):
    loss, pen = alg.update(envs)
print("loss", round(loss, 4), "penalty", round(pen, 6))
print("weight", round(alg.network[0].weight.norm().item(), 4))
