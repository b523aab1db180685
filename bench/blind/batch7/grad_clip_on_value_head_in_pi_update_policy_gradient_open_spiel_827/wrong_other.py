"""The policy-gradient agent's _pi_update passes the baseline (value) layer to minimize_with_clipping, so it clips the value head's gradient, which the policy loss does not even reach, and steps the policy with an unclipped gradient.

source: https://github.com/google-deepmind/open_spiel/issues/827
symptom: silent
rule: ?
shape: RL agent class (PolicyGradient with torso / policy-logits / baseline Linear submodules, two optimizers), A2C pi update with gradient-norm clipping
wrong: other
why: clips the joint norm of torso, policy and baseline parameters; the torso's large gradient dominates the norm, so the policy layer's step is scaled differently from clipping the policy layer alone
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class BatchA2CLoss:
    def loss(self, policy_logits, baseline, actions, returns):
        advantages = (returns - baseline).detach()
        log_probs = F.log_softmax(policy_logits, -1).gather(1, actions.unsqueeze(1)).squeeze(1)
        return -(log_probs * advantages).mean()


class PolicyGradient:
    def __init__(self, obs_dim, num_actions, max_global_gradient_norm=0.5):
        self._net_torso = nn.Sequential(nn.Linear(obs_dim, 32), nn.ReLU())
        self._policy_logits_layer = nn.Linear(32, num_actions)
        self._baseline_layer = nn.Linear(32, 1)
        self._max_global_gradient_norm = max_global_gradient_norm
        self.pg_class = BatchA2CLoss()
        self._pi_optimizer = torch.optim.SGD(
            list(self._net_torso.parameters()) + list(self._policy_logits_layer.parameters()), lr=0.1
        )

    def minimize_with_clipping(self, model, optimizer, loss):
        optimizer.zero_grad()
        loss.backward()
        if self._max_global_gradient_norm is not None:
            nn.utils.clip_grad_norm_(model.parameters(), self._max_global_gradient_norm)
        optimizer.step()

    def _pi_update(self, info_state, action, return_):
        torso_out = self._net_torso(info_state)
        policy_logits = self._policy_logits_layer(torso_out)
        baseline = torch.squeeze(self._baseline_layer(torso_out), dim=1)
        pi_loss = self.pg_class.loss(policy_logits=policy_logits, baseline=baseline, actions=action, returns=return_)
        joint = nn.ModuleList([self._net_torso, self._policy_logits_layer, self._baseline_layer])
        self.minimize_with_clipping(joint, self._pi_optimizer, pi_loss)
        return pi_loss


agent = PolicyGradient(obs_dim=6, num_actions=3)
info_state = torch.randn(16, 6)
action = torch.randint(0, 3, (16,))
return_ = torch.randn(16) * 20.0
for step in range(3):
    pi_loss = agent._pi_update(info_state, action, return_)
print("pi loss", round(pi_loss.item(), 4))
print("policy grad", round(agent._policy_logits_layer.weight.grad.norm().item(), 4))
print("policy weight", round(agent._policy_logits_layer.weight.norm().item(), 4))
