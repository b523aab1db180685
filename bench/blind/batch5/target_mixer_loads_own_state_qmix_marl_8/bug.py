"""The QMIX learner's periodic target update loads the target mixer's own state dict into itself, so the target mixing network never follows the trained mixer and every TD target uses the initial mixer.

source: https://github.com/thesouther/MARL/issues/8
symptom: silent
rule: ?
shape: QMIX policy class (agent Q-network, hypernetwork mixer, target copies, learn() with periodic target update), a few learn steps on a synthetic batch
"""
import torch
from torch import nn

torch.manual_seed(0)
N_AGENTS, OBS, N_ACT, STATE = 3, 6, 4, 8


class AgentNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(OBS, 16)
        self.fc2 = nn.Linear(16, N_ACT)

    def forward(self, obs):
        return self.fc2(torch.relu(self.fc1(obs)))


class QMixNet(nn.Module):
    def __init__(self, hidden=8):
        super().__init__()
        self.hidden = hidden
        self.hyper_w1 = nn.Linear(STATE, N_AGENTS * hidden)
        self.hyper_b1 = nn.Linear(STATE, hidden)
        self.hyper_w2 = nn.Linear(STATE, hidden)
        self.hyper_b2 = nn.Linear(STATE, 1)

    def forward(self, q_values, states):
        w1 = self.hyper_w1(states).abs().view(-1, N_AGENTS, self.hidden)
        b1 = self.hyper_b1(states).view(-1, 1, self.hidden)
        h = torch.relu(torch.bmm(q_values.unsqueeze(1), w1) + b1)
        w2 = self.hyper_w2(states).abs().view(-1, self.hidden, 1)
        return (torch.bmm(h, w2) + self.hyper_b2(states).view(-1, 1, 1)).view(-1)


class QMIX:
    def __init__(self, target_update_cycle=2, gamma=0.9):
        self.eval_rnn, self.target_rnn = AgentNet(), AgentNet()
        self.eval_qmix_net, self.target_qmix_net = QMixNet(), QMixNet()
        self.target_rnn.load_state_dict(self.eval_rnn.state_dict())
        self.target_qmix_net.load_state_dict(self.eval_qmix_net.state_dict())
        self.params = list(self.eval_rnn.parameters()) + list(self.eval_qmix_net.parameters())
        self.optimizer = torch.optim.RMSprop(self.params, lr=5e-3)
        self.cycle, self.gamma = target_update_cycle, gamma

    def learn(self, batch, train_step):
        obs, act, r, obs_next, s, s_next, done = batch
        q_evals = self.eval_rnn(obs).gather(-1, act.unsqueeze(-1)).squeeze(-1)
        q_targets = self.target_rnn(obs_next).max(-1)[0]
        q_total_eval = self.eval_qmix_net(q_evals, s)
        q_total_target = self.target_qmix_net(q_targets, s_next)
        targets = r + self.gamma * q_total_target * (1 - done)
        loss = ((q_total_eval - targets.detach()) ** 2).mean()
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        if train_step > 0 and train_step % self.cycle == 0:
            self.target_rnn.load_state_dict(self.eval_rnn.state_dict())
            self.target_qmix_net.load_state_dict(self.target_qmix_net.state_dict())  # bench: bug
        return loss


B = 16
batch = (torch.randn(B, N_AGENTS, OBS), torch.randint(0, N_ACT, (B, N_AGENTS)), torch.randn(B),
         torch.randn(B, N_AGENTS, OBS), torch.randn(B, STATE), torch.randn(B, STATE), torch.zeros(B))
policy = QMIX()
for step in range(6):
    loss = policy.learn(batch, step)
print("loss", round(loss.item(), 4))
print("grad hyper_w1", round(policy.eval_qmix_net.hyper_w1.weight.grad.norm().item(), 4))
print("grad agent fc1", round(policy.eval_rnn.fc1.weight.grad.norm().item(), 4))
