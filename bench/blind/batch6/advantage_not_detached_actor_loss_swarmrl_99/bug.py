"""The actor-critic loss multiplies the log-probabilities by an advantage computed from the critic without detaching it, so the actor loss also backpropagates into the critic network.

source: https://github.com/SwarmRL/SwarmRL/pull/99
symptom: silent
rule: ?
shape: RL library loss class: actor and critic nn.Modules, advantage = returns - values, actor loss + critic loss, one optimizer step per network
"""
import torch
import torch.nn as nn

torch.manual_seed(0)


class ActorCritic(nn.Module):
    def __init__(self, obs=4, act=3):
        super().__init__()
        self.actor = nn.Sequential(nn.Linear(obs, 16), nn.Tanh(), nn.Linear(16, act))
        self.critic = nn.Sequential(nn.Linear(obs, 16), nn.Tanh(), nn.Linear(16, 1))


class PolicyGradientLoss:
    def compute_loss(self, network, obs, actions, returns):
        log_probs = network.actor(obs).log_softmax(-1).gather(1, actions[:, None]).squeeze(1)
        values = network.critic(obs).squeeze(1)
        advantage = returns - values
        actor_loss = -(log_probs * advantage).mean()  # bench: bug
        critic_loss = advantage.pow(2).mean()
        return actor_loss, critic_loss


net = ActorCritic()
actor_opt = torch.optim.SGD(net.actor.parameters(), lr=0.05)
critic_opt = torch.optim.SGD(net.critic.parameters(), lr=0.05)
obs = torch.randn(32, 4)
actions = torch.randint(0, 3, (32,))
returns = torch.randn(32)
actor_loss, critic_loss = PolicyGradientLoss().compute_loss(net, obs, actions, returns)
actor_opt.zero_grad()
critic_opt.zero_grad()
(actor_loss + critic_loss).backward()
print("actor loss", round(actor_loss.item(), 4), "critic loss", round(critic_loss.item(), 4))
g = net.critic[0].weight.grad
print("critic grad", None if g is None else round(g.norm().item(), 4))
print("actor grad", round(net.actor[0].weight.grad.norm().item(), 4))
