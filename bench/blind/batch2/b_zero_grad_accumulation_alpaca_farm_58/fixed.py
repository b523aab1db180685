"""Under gradient accumulation the trainer clears gradients with `policy.zero_grad()`, which (unlike the wrapped optimizer's `zero_grad`) is not skipped between accumulation steps, so every optimizer step sees only the last micro-batch.

source: https://github.com/tatsu-lab/alpaca_farm/pull/58
symptom: silent
rule: ?
shape: RL trainer class (PPO step over rollouts, actor-critic nn.Module) with an accelerate-style gradient-accumulation wrapper around Adam
"""

import contextlib

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class GradientState:
    def __init__(self, accumulation_steps):
        self.accumulation_steps = accumulation_steps
        self.step = 0
        self.sync_gradients = True


class AcceleratedOptimizer:
    """Like accelerate's wrapper: step and zero_grad only act on synchronising steps."""

    def __init__(self, optimizer, state):
        self.optimizer = optimizer
        self.state = state

    def step(self):
        if self.state.sync_gradients:
            self.optimizer.step()

    def zero_grad(self, set_to_none=True):
        if self.state.sync_gradients:
            self.optimizer.zero_grad(set_to_none=set_to_none)


class Accelerator:
    def __init__(self, gradient_accumulation_steps):
        self.state = GradientState(gradient_accumulation_steps)

    @property
    def sync_gradients(self):
        return self.state.sync_gradients

    def prepare(self, optimizer):
        return AcceleratedOptimizer(optimizer, self.state)

    @contextlib.contextmanager
    def accumulate(self, model):
        self.state.step += 1
        self.state.sync_gradients = self.state.step % self.state.accumulation_steps == 0
        yield

    def backward(self, loss):
        (loss / self.state.accumulation_steps).backward()


class ActorCritic(nn.Module):
    def __init__(self, obs_dim=6, n_actions=4):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(obs_dim, 32), nn.Tanh())
        self.policy_head = nn.Linear(32, n_actions)
        self.value_head = nn.Linear(32, 1)

    def forward(self, obs):
        h = self.body(obs)
        return self.policy_head(h), self.value_head(h).squeeze(-1)


class RLTrainer:
    def __init__(self, policy, accelerator, noptepochs=1, cliprange=0.2, vf_coef=0.5):
        self.policy = policy
        self.accelerator = accelerator
        self.optimizer = accelerator.prepare(torch.optim.Adam(policy.parameters(), lr=1e-3))
        self.noptepochs = noptepochs
        self.cliprange = cliprange
        self.vf_coef = vf_coef

    def compute_loss(self, batch):
        obs, actions, old_logprobs, advantages, returns = batch
        logits, values = self.policy(obs)
        logprobs = F.log_softmax(logits, -1).gather(1, actions[:, None]).squeeze(1)
        ratio = torch.exp(logprobs - old_logprobs)
        pg_losses = -advantages * ratio
        pg_losses2 = -advantages * torch.clamp(ratio, 1.0 - self.cliprange, 1.0 + self.cliprange)
        pg_loss = torch.max(pg_losses, pg_losses2).mean()
        vf_loss = 0.5 * ((values - returns) ** 2).mean()
        return pg_loss + self.vf_coef * vf_loss

    def _compute_grad_norm(self):
        return torch.stack([p.grad.norm(2) for p in self.policy.parameters() if p.grad is not None]).norm(2)

    def step_with_rollouts(self, batches):
        grad_norms = []
        for epoch_idx in range(self.noptepochs):
            for batch in batches:
                with self.accelerator.accumulate(self.policy):
                    ppo_loss = self.compute_loss(batch)
                    self.accelerator.backward(ppo_loss)
                    if self.accelerator.sync_gradients:
                        grad_norms.append(self._compute_grad_norm())
                    self.optimizer.step()
                    self.optimizer.zero_grad(set_to_none=True)
        return ppo_loss, grad_norms


def make_rollouts(n_batches=4, batch_size=8, obs_dim=6, n_actions=4):
    batches = []
    for _ in range(n_batches):
        obs = torch.randn(batch_size, obs_dim)
        actions = torch.randint(0, n_actions, (batch_size,))
        old_logprobs = torch.full((batch_size,), -1.3863)
        advantages = torch.randn(batch_size)
        returns = torch.randn(batch_size)
        batches.append((obs, actions, old_logprobs, advantages, returns))
    return batches


policy = ActorCritic()
trainer = RLTrainer(policy, Accelerator(gradient_accumulation_steps=4), noptepochs=2)
loss, grad_norms = trainer.step_with_rollouts(make_rollouts())

print("loss", round(loss.item(), 4))
print("grad norms at optimizer steps", [round(g.item(), 4) for g in grad_norms])
print("value head weight sum", round(policy.value_head.weight.sum().item(), 4))
