"""The Dice activation stores its learnable rectification slope `alpha` as a plain tensor attribute, so it is not registered as a parameter, never reaches the optimizer and stays at zero.

source: https://github.com/shenweichen/DeepCTR-Torch/issues/93 (fix commit 2e42ff6, PR #142)
symptom: no-training
rule: ?
shape: CTR model of nn.Modules (embedding, DNN built by an activation_layer factory with a custom Dice activation module), BCE loss, Adam training loop
wrong: other
why: requires_grad=True gives alpha a gradient but it is still a plain attribute, not a registered parameter, so model.parameters() and the optimizer never see it and it stays zero.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class Dice(nn.Module):
    def __init__(self, emb_size, dim=2, epsilon=1e-8, device="cpu"):
        super(Dice, self).__init__()
        assert dim == 2 or dim == 3
        self.bn = nn.BatchNorm1d(emb_size, eps=epsilon)
        self.sigmoid = nn.Sigmoid()
        self.dim = dim
        if self.dim == 2:
            self.alpha = torch.zeros((emb_size,), requires_grad=True).to(device)
        else:
            self.alpha = torch.zeros((emb_size, 1), requires_grad=True).to(device)

    def forward(self, x):
        assert x.dim() == self.dim
        if self.dim == 2:
            x_p = self.sigmoid(self.bn(x))
            out = self.alpha * (1 - x_p) * x + x_p * x
        else:
            x = torch.transpose(x, 1, 2)
            x_p = self.sigmoid(self.bn(x))
            out = self.alpha * (1 - x_p) * x + x_p * x
            out = torch.transpose(out, 1, 2)
        return out


def activation_layer(act_name, hidden_size=None, dice_dim=2):
    if act_name.lower() == "relu":
        return nn.ReLU(inplace=True)
    if act_name.lower() == "dice":
        return Dice(hidden_size, dice_dim)
    raise NotImplementedError


class DNN(nn.Module):
    def __init__(self, inputs_dim, hidden_units, activation="dice"):
        super().__init__()
        hidden_units = [inputs_dim] + list(hidden_units)
        self.linears = nn.ModuleList(nn.Linear(hidden_units[i], hidden_units[i + 1]) for i in range(len(hidden_units) - 1))
        self.activation_layers = nn.ModuleList(
            activation_layer(activation, hidden_units[i + 1]) for i in range(len(hidden_units) - 1)
        )

    def forward(self, x):
        for linear, act in zip(self.linears, self.activation_layers):
            x = act(linear(x))
        return x


class CTRModel(nn.Module):
    def __init__(self, vocab=50, emb=8, n_fields=3):
        super().__init__()
        self.embedding = nn.Embedding(vocab, emb)
        self.dnn = DNN(emb * n_fields, (16, 8))
        self.out = nn.Linear(8, 1)

    def forward(self, ids):
        x = self.embedding(ids).flatten(1)
        return self.out(self.dnn(x)).squeeze(-1)


model = CTRModel()
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
ids = torch.randint(0, 50, (64, 3))
labels = (ids.sum(1) % 2).float()

for step in range(5):
    opt.zero_grad()
    loss = F.binary_cross_entropy_with_logits(model(ids), labels)
    loss.backward()
    opt.step()

print("loss", round(loss.item(), 4))
print("dice alpha norm", round(model.dnn.activation_layers[0].alpha.detach().norm().item(), 4))
print("n parameters", sum(p.numel() for p in model.parameters()))
