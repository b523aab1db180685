"""The actor-critic agent collects its action log-probabilities with `torch.tensor(self.body.log_probs, requires_grad=True)`, which copies them into a new leaf, so the policy loss never reaches the actor network and the actor's gradients stay None.

source: https://github.com/kengz/SLM-Lab/pull/133
symptom: none-grad
rule: ?
shape: RL agent classes (body storing log-probs during act, ActorCritic algorithm with separate actor and critic nets, calc_policy_loss / calc_val_loss / train_actor / train_critic), episodes on a synthetic environment
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self, in_dim, out_dim, lr):
        super().__init__()
        self.model = nn.Sequential(nn.Linear(in_dim, 16), nn.Tanh(), nn.Linear(16, out_dim))
        self.loss_fn = nn.MSELoss()
        self.optim = torch.optim.Adam(self.parameters(), lr=lr)

    def forward(self, x):
        return self.model(x)

    def training_step(self, loss):
        self.optim.zero_grad()
        loss.backward()
        self.optim.step()
        return loss


class Body:
    def __init__(self):
        self.log_probs = []
        self.entropies = []


class ActorCritic:
    def __init__(self, state_dim=4, n_actions=2, gamma=0.9):
        self.body = Body()
        self.net = Net(state_dim, n_actions, lr=1e-2)
        self.critic = Net(state_dim, 1, lr=1e-2)
        self.gamma = gamma
        self.add_entropy = True
        self.entropy_coef = 0.01
        self.policy_loss_coef = 1.0
        self.val_loss_coef = 1.0

    def act(self, state):
        pd = torch.distributions.Categorical(logits=self.net(state))
        action = pd.sample()
        self.body.log_probs.append(pd.log_prob(action))
        self.body.entropies.append(pd.entropy())
        return action

    def calc_v(self, states):
        return self.critic(states).squeeze(-1)

    def calc_advs_v_targets(self, batch):
        v_preds = self.calc_v(batch["states"])
        next_v = self.calc_v(batch["next_states"]) * (1 - batch["dones"])
        v_targets = batch["rewards"] + self.gamma * next_v
        return v_targets - v_preds, v_targets

    def calc_policy_loss(self, advs):
        log_probs = torch.tensor(self.body.log_probs, requires_grad=True)  # bench: bug
        entropies = torch.tensor(self.body.entropies, requires_grad=True)  # bench: bug
        if self.add_entropy:  # bench: bug
            policy_loss = (-log_probs * advs) - self.entropy_coef * entropies  # bench: bug
        else:  # bench: bug
            policy_loss = -log_probs * advs  # bench: bug
        return torch.mean(policy_loss)

    def calc_val_loss(self, batch, v_targets):
        v_preds = self.calc_v(batch["states"])
        return self.val_loss_coef * self.critic.loss_fn(v_preds, v_targets)

    def train_actor(self, advs):
        policy_loss = self.calc_policy_loss(advs)
        self.net.training_step(loss=policy_loss)
        return policy_loss

    def train_critic(self, batch):
        with torch.no_grad():
            _, v_targets = self.calc_advs_v_targets(batch)
        val_loss = self.calc_val_loss(batch, v_targets)
        self.critic.training_step(loss=val_loss)
        return val_loss

    def train(self, batch):
        with torch.no_grad():
            advs, v_targets = self.calc_advs_v_targets(batch)
        policy_loss = self.train_actor(advs)
        val_loss = self.train_critic(batch)
        self.body.log_probs, self.body.entropies = [], []
        return val_loss + abs(policy_loss)


def run_episode(agent, steps=12, state_dim=4):
    states, next_states, rewards, dones = [], [], [], []
    state = torch.randn(state_dim)
    for t in range(steps):
        action = agent.act(state)
        reward = 1.0 if action.item() == int(state[0] > 0) else 0.0
        next_state = torch.randn(state_dim)
        states.append(state)
        next_states.append(next_state)
        rewards.append(reward)
        dones.append(1.0 if t == steps - 1 else 0.0)
        state = next_state
    return {
        "states": torch.stack(states),
        "next_states": torch.stack(next_states),
        "rewards": torch.tensor(rewards),
        "dones": torch.tensor(dones),
    }


agent = ActorCritic()
for episode in range(3):
    batch = run_episode(agent)
    loss = agent.train(batch)

actor_w = agent.net.model[0].weight
print("loss", round(loss.item(), 4))
print("actor grad", None if actor_w.grad is None else round(actor_w.grad.norm().item(), 4))
print("critic grad", round(agent.critic.model[0].weight.grad.norm().item(), 4))
