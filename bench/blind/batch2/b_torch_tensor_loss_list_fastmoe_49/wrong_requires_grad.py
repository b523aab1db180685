"""The balance loss of the MoE gates is collected with `torch.tensor(loss_list)`, which copies the per-layer losses into a new leaf tensor, so the balance term is added to the loss value but sends no gradient to the gates.

source: https://github.com/laekov/fastmoe/issues/49 (fix commits 913d712 and a12ad55)
symptom: silent
rule: ?
shape: mixture-of-experts model (gate nn.Module storing its balance loss, MoE layers inside transformer-style blocks), a forward_step wrapper that adds the balance loss, SGD training loop
wrong: detach
why: torch.tensor(..., requires_grad=True) still copies the values into a new leaf; the balance term can be backpropagated into that copy but never reaches the gates.
"""

from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class SwitchGate(nn.Module):
    def __init__(self, d_model, num_expert):
        super().__init__()
        self.num_expert = num_expert
        self.gate = nn.Linear(d_model, num_expert)
        self.loss = None

    def set_loss(self, loss):
        self.loss = loss

    def get_loss(self, clear=True):
        loss = self.loss
        if clear:
            self.loss = None
        return loss

    def forward(self, inp):
        score = F.softmax(self.gate(inp), dim=-1)
        top1_score, top1_idx = score.max(dim=-1)
        frac = F.one_hot(top1_idx, self.num_expert).float().mean(0)
        prob = score.mean(0)
        self.set_loss(self.num_expert * (frac * prob).sum())
        return top1_idx, top1_score


class MoEMLP(nn.Module):
    def __init__(self, d_model=8, num_expert=4):
        super().__init__()
        self.gate = SwitchGate(d_model, num_expert)
        self.experts = nn.ModuleList(nn.Linear(d_model, d_model) for _ in range(num_expert))

    def forward(self, x):
        idx, score = self.gate(x)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            sel = idx == e
            if sel.any():
                out[sel] = expert(x[sel]) * score[sel, None]
        return out


class Block(nn.Module):
    def __init__(self, d_model=8):
        super().__init__()
        self.ln = nn.LayerNorm(d_model)
        self.mlp = MoEMLP(d_model)

    def forward(self, x):
        return x + self.mlp(self.ln(x))


class Transformer(nn.Module):
    def __init__(self, n_layers=2, d_model=8):
        super().__init__()
        self.layers = nn.ModuleList(Block(d_model) for _ in range(n_layers))
        self.head = nn.Linear(d_model, 3)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def forward_step(batch, model):
    x, y = batch
    loss = F.cross_entropy(model(x), y)
    return loss, {"lm loss": loss.detach()}


def patch_forward_step(forward_step_func, args):
    def forward_step_with_balance_loss(batch, model):
        output = forward_step_func(batch, model)
        loss_name = args.balance_strategy + "_loss"
        loss_list = [l.mlp.gate.get_loss(clear=False) for l in model.layers]
        (loss, state_dict), bal_loss = (
            output,
            (torch.tensor(loss_list, device=loss_list[0].device, requires_grad=True).mean() * args.balance_loss_weight).float(),
        )
        loss = loss + bal_loss
        state_dict[loss_name] = bal_loss.clone().detach()
        return loss, state_dict

    return forward_step_with_balance_loss


args = SimpleNamespace(balance_strategy="switch", balance_loss_weight=1.0)
model = Transformer()
step_fn = patch_forward_step(forward_step, args)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(32, 8)
y = torch.randint(0, 3, (32,))

for it in range(3):
    opt.zero_grad()
    loss, state = step_fn((x, y), model)
    loss.backward()
    opt.step()

print("loss", round(loss.item(), 4))
print("balance loss", round(state["switch_loss"].item(), 4))
print("gate0 grad norm", round(model.layers[0].mlp.gate.gate.weight.grad.norm().item(), 4))
print("gate1 grad norm", round(model.layers[1].mlp.gate.gate.weight.grad.norm().item(), 4))
