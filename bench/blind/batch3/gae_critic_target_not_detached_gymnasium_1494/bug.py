"""The A2C agent trains its critic on advantages.pow(2) with the GAE advantages still attached to the value predictions, so the critic loss back-propagates through the bootstrapped targets value_preds[t + 1] instead of regressing V towards a fixed target.

source: https://github.com/Farama-Foundation/Gymnasium/issues/1494
symptom: silent
rule: ?
shape: A2C nn.Module (actor and critic submodules with their own optimizers, get_losses method computing GAE over a rollout, update_parameters method), vectorised rollout loop
"""
import torch
import torch.nn as nn

torch.manual_seed(0)


class A2C(nn.Module):
    def __init__(self, n_features, n_actions, critic_lr, actor_lr, n_envs):
        super().__init__()
        self.n_envs = n_envs
        self.critic = nn.Sequential(nn.Linear(n_features, 16), nn.ReLU(), nn.Linear(16, 1))
        self.actor = nn.Sequential(nn.Linear(n_features, 16), nn.ReLU(), nn.Linear(16, n_actions))
        self.critic_optim = torch.optim.RMSprop(self.critic.parameters(), lr=critic_lr)
        self.actor_optim = torch.optim.RMSprop(self.actor.parameters(), lr=actor_lr)

    def select_action(self, x):
        state_values = self.critic(x)
        dist = torch.distributions.Categorical(logits=self.actor(x))
        actions = dist.sample()
        return actions, dist.log_prob(actions), state_values, dist.entropy()

    def get_losses(self, rewards, action_log_probs, value_preds, entropy, masks, gamma, lam, ent_coef):
        T = len(rewards)
        advantages = torch.zeros(T, self.n_envs)
        gae = 0.0
        for t in reversed(range(T - 1)):
            td_error = rewards[t] + gamma * masks[t] * value_preds[t + 1] - value_preds[t]
            gae = td_error + gamma * lam * masks[t] * gae
            advantages[t] = gae
        critic_loss = advantages.pow(2).mean()  # bench: bug
        actor_loss = -(advantages.detach() * action_log_probs).mean() - ent_coef * entropy.mean()
        return critic_loss, actor_loss

    def update_parameters(self, critic_loss, actor_loss):
        self.critic_optim.zero_grad()
        critic_loss.backward()
        self.critic_optim.step()
        self.actor_optim.zero_grad()
        actor_loss.backward()
        self.actor_optim.step()


n_envs, T = 3, 6
agent = A2C(4, 2, critic_lr=5e-3, actor_lr=1e-3, n_envs=n_envs)
for update in range(3):
    states = torch.randn(T, n_envs, 4)
    ep_value_preds = torch.zeros(T, n_envs)
    ep_rewards = torch.rand(T, n_envs)
    ep_log_probs = torch.zeros(T, n_envs)
    masks = (torch.rand(T, n_envs) > 0.1).float()
    entropies = []
    for step in range(T):
        actions, log_probs, state_value, entropy = agent.select_action(states[step])
        ep_value_preds[step] = torch.squeeze(state_value)
        ep_log_probs[step] = log_probs
        entropies.append(entropy)
    critic_loss, actor_loss = agent.get_losses(ep_rewards, ep_log_probs, ep_value_preds, torch.stack(entropies), masks, 0.999, 0.95, 0.01)
    agent.update_parameters(critic_loss, actor_loss)

gc = torch.sqrt(sum((p.grad ** 2).sum() for p in agent.critic.parameters()))
print("critic_loss", round(critic_loss.item(), 4))
print("actor_loss", round(actor_loss.item(), 4))
print("critic_grad", round(gc.item(), 4))
