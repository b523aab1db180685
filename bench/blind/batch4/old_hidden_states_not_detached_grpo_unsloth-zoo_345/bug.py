"""The GRPO loss recomputes old-policy and reference log-probs from hidden states that still carry the graph of the policy forward that produced them, so gradient also flows through the "old" log-probs and the importance ratio's gradient cancels.

source: https://github.com/unslothai/unsloth-zoo/pull/345
symptom: silent
rule: ?
shape: RL trainer: policy LM module (embedding, body, lm_head) whose hidden states are computed once per step with grad enabled and passed to grpo_accumulated_loss (ratio exp(new - old), clipped surrogate, KL to the reference) over two micro-batches; Adam step
"""
import torch
import torch.nn as nn

torch.manual_seed(0)


class PolicyLM(nn.Module):
    def __init__(self, vocab=12, d=16):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.body = nn.Sequential(nn.Linear(d, d), nn.Tanh())
        self.lm_head = nn.Linear(d, vocab, bias=False)

    def hidden(self, ids):
        return self.body(self.embed(ids))

    def logps(self, hidden, ids):
        logp = torch.log_softmax(self.lm_head(hidden[:, :-1]), dim=-1)
        return logp.gather(-1, ids[:, 1:, None]).squeeze(-1)


def grpo_accumulated_loss(model, ids, advantages, old_hidden_states, ref_hidden_states, beta=0.04, eps=0.2):
    old_hidden_states = old_hidden_states  # bench: bug
    ref_hidden_states = ref_hidden_states  # bench: bug
    new_logps = model.logps(model.hidden(ids), ids)
    old_logps = model.logps(old_hidden_states, ids)
    ref_logps = model.logps(ref_hidden_states, ids)
    ratio = torch.exp(new_logps - old_logps)
    surrogate = torch.min(ratio * advantages[:, None], ratio.clamp(1 - eps, 1 + eps) * advantages[:, None])
    kl = torch.exp(ref_logps - new_logps) - (ref_logps - new_logps) - 1
    return -(surrogate - beta * kl).mean()


model = PolicyLM()
ref_model = PolicyLM()
ref_model.load_state_dict(model.state_dict())
ref_model.requires_grad_(False)
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
ids = torch.randint(0, 12, (4, 7))
advantages = torch.tensor([1.0, -0.5, 0.8, -1.3])
for step in range(2):
    old_hidden = model.hidden(ids)  # gathered once per step, with grad enabled
    ref_hidden = ref_model.hidden(ids)
    opt.zero_grad()
    for mb in (slice(0, 2), slice(2, 4)):
        loss = grpo_accumulated_loss(model, ids[mb], advantages[mb], old_hidden[mb], ref_hidden[mb])
        loss.backward(retain_graph=True)
    grad_norm = model.lm_head.weight.grad.norm().item()
    opt.step()
print("loss", round(loss.item(), 4))
print("lm_head grad", round(grad_norm, 4))
print("body grad", round(model.body[0].weight.grad.norm().item(), 4))
