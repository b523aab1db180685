"""The environment's get_logprobs copies the policy outputs with .clone().detach() before masking invalid actions, so the trajectory-balance loss trains only logZ and the forward policy network gets no gradient at all.

source: https://github.com/alexhernandezgarcia/gflownet/pull/251
symptom: none-grad
rule: ?
shape: GFlowNet library: environment base class (masked log-probabilities of sampled actions), agent with policy MLP and learned logZ, trajectory-balance loss, one optimizer step
"""
import torch
from torch import nn

torch.manual_seed(0)


class GFlowNetEnv:
    def __init__(self, n_actions=5, state_dim=6):
        self.n_actions, self.state_dim = n_actions, state_dim

    def get_mask_invalid_actions(self, states):
        return states[:, : self.n_actions] > 1.0

    def get_logprobs(self, policy_outputs, actions, mask=None):
        ns_range = torch.arange(policy_outputs.shape[0])
        logits = policy_outputs.clone().detach()  # bench: bug
        if mask is not None:
            logits[mask] = -torch.inf
        logprobs = torch.log_softmax(logits, dim=1)
        return logprobs[ns_range, actions]

    def reward(self, final_states):
        return final_states.pow(2).sum(-1).add(1.0)


class GFlowNetAgent(nn.Module):
    def __init__(self, env, hidden=32):
        super().__init__()
        self.env = env
        self.forward_policy = nn.Sequential(nn.Linear(env.state_dim, hidden), nn.LeakyReLU(),
                                            nn.Linear(hidden, env.n_actions))
        self.logZ = nn.Parameter(torch.zeros(1))

    def trajectorybalance_loss(self, states, actions, traj_ids, final_states):
        masks = self.env.get_mask_invalid_actions(states)
        logprobs = self.env.get_logprobs(self.forward_policy(states), actions, masks)
        n_traj = final_states.shape[0]
        sumlogprobs = torch.zeros(n_traj).index_add_(0, traj_ids, logprobs)
        log_rewards = self.env.reward(final_states).log()
        return (self.logZ + sumlogprobs - log_rewards).pow(2).mean()


env = GFlowNetEnv()
agent = GFlowNetAgent(env)
opt = torch.optim.Adam([{"params": agent.forward_policy.parameters(), "lr": 1e-3},
                        {"params": [agent.logZ], "lr": 1e-2}])
n_traj, length = 4, 3
states = torch.randn(n_traj * length, env.state_dim)
states[:, 0] = -1.0  # action 0 is always valid
mask = env.get_mask_invalid_actions(states)
actions = torch.multinomial((~mask).float(), 1).squeeze(1)
traj_ids = torch.arange(n_traj).repeat_interleave(length)
final_states = torch.randn(n_traj, env.state_dim)
opt.zero_grad()
loss = agent.trajectorybalance_loss(states, actions, traj_ids, final_states)
loss.backward()
opt.step()


def gnorm(p):
    return None if p.grad is None else round(p.grad.norm().item(), 4)


print("loss", round(loss.item(), 4))
print("grad logZ", gnorm(agent.logZ))
print("grad policy", gnorm(agent.forward_policy[0].weight))
