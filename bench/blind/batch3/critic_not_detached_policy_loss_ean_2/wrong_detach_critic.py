"""The REINFORCE-with-baseline trainer uses the critic prediction inside the policy loss without detaching it, so the policy loss also back-propagates into the critic.

source: https://github.com/astariul/encode-attend-navigate-pytorch/issues/2
symptom: silent
rule: ?
shape: TSP actor-critic trainer: encoder/actor nn.Module sampling a tour, critic nn.Module predicting its length, summed actor and critic losses with one optimizer
wrong: detach
why: detaching the critic output where it is computed stops the leak into the critic, but the critic loss then has no gradient either, so the baseline never learns.
"""
import torch
import torch.nn as nn

torch.manual_seed(0)


class Actor(nn.Module):
    def __init__(self, n_cities, hidden=16):
        super().__init__()
        self.enc = nn.Linear(2, hidden)
        self.att = nn.Linear(hidden, hidden)

    def forward(self, coords):
        h = torch.tanh(self.enc(coords))  # [B, N, H]
        B, N, _ = h.shape
        mask = torch.zeros(B, N, dtype=torch.bool)
        query = h.mean(1)
        tour, log_probs = [], []
        for t in range(N):
            logits = (self.att(h) @ query.unsqueeze(-1)).squeeze(-1).masked_fill(mask, -1e9)
            dist = torch.distributions.Categorical(logits=logits)
            a = dist.sample()
            tour.append(a)
            log_probs.append(dist.log_prob(a))
            mask = mask.clone()
            mask[torch.arange(B), a] = True
            query = h[torch.arange(B), a]
        return torch.stack(tour, 1), torch.stack(log_probs, 1).sum(1)


class Critic(nn.Module):
    def __init__(self, hidden=16):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(2, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def forward(self, coords):
        return self.net(coords).mean(1).squeeze(-1)


def tour_length(coords, tour):
    ordered = coords[torch.arange(coords.size(0)).unsqueeze(1), tour]
    return (ordered - ordered.roll(1, dims=1)).norm(dim=-1).sum(1)


class Trainer:
    def __init__(self):
        self.actor, self.critic = Actor(5), Critic()
        self.optimizer = torch.optim.Adam(list(self.actor.parameters()) + list(self.critic.parameters()), lr=1e-3)

    def train_step(self, coords):
        tour, log_probs = self.actor(coords)
        reward = tour_length(coords, tour)
        predictions = self.critic(coords).detach()
        td_error = reward - predictions
        actor_loss = torch.mean(td_error * log_probs)
        critic_loss = nn.functional.mse_loss(predictions, reward)
        loss = actor_loss + critic_loss
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return actor_loss, critic_loss


trainer = Trainer()
for it in range(3):
    actor_loss, critic_loss = trainer.train_step(torch.rand(4, 5, 2))

gc = torch.sqrt(sum([(p.grad ** 2).sum() for p in trainer.critic.parameters() if p.grad is not None], torch.tensor(0.0)))
ga = torch.sqrt(sum([(p.grad ** 2).sum() for p in trainer.actor.parameters() if p.grad is not None], torch.tensor(0.0)))
print("actor_loss", round(actor_loss.item(), 4))
print("critic_loss", round(critic_loss.item(), 4))
print("critic_grad", round(gc.item(), 4))
print("actor_grad", round(ga.item(), 4))
