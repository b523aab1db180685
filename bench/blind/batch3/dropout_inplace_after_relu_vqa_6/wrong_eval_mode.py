"""The answer classifier puts nn.Dropout(inplace=True) right after nn.ReLU(), so dropout overwrites the ReLU output that ReLU's backward needs.

source: https://github.com/BierOne/bottom-up-attention-vqa/issues/6
symptom: error
rule: ?
shape: VQA model nn.Module (question and image encoders, joint product, SimpleClassifier submodule built from an nn.Sequential), BCE training step
wrong: forward-change
why: training with model.eval() makes the error go away only because dropout is switched off, so the model trains without the dropout regularisation and its losses and gradients differ.
"""
import warnings

import torch
import torch.nn as nn
from torch.nn.utils import weight_norm

warnings.filterwarnings("ignore")
torch.manual_seed(0)


class SimpleClassifier(nn.Module):
    def __init__(self, in_dim, hid_dim, out_dim, dropout):
        super().__init__()
        layers = [
            weight_norm(nn.Linear(in_dim, hid_dim), dim=None),
            nn.ReLU(),
            nn.Dropout(dropout, inplace=True),
            weight_norm(nn.Linear(hid_dim, out_dim), dim=None),
        ]
        self.main = nn.Sequential(*layers)

    def forward(self, x):
        return self.main(x)


class BaseModel(nn.Module):
    def __init__(self, v_dim=6, q_dim=5, num_hid=8, num_ans=4):
        super().__init__()
        self.q_net = nn.Sequential(nn.Linear(q_dim, num_hid), nn.ReLU())
        self.v_net = nn.Sequential(nn.Linear(v_dim, num_hid), nn.ReLU())
        self.classifier = SimpleClassifier(num_hid, 2 * num_hid, num_ans, 0.5)

    def forward(self, v, q):
        joint_repr = self.q_net(q) * self.v_net(v).mean(1)
        return self.classifier(joint_repr)


def instance_bce_with_logits(logits, labels):
    return nn.functional.binary_cross_entropy_with_logits(logits, labels) * labels.size(1)


model = BaseModel()
optim = torch.optim.Adamax(model.parameters())
model.eval()
for step in range(2):
    v, q = torch.randn(3, 5, 6), torch.randn(3, 5)
    a = torch.rand(3, 4)
    pred = model(v, q)
    loss = instance_bce_with_logits(pred, a)
    loss.backward()
    optim.step()
    optim.zero_grad()

loss = instance_bce_with_logits(model(v, q), a)
loss.backward()
g = torch.sqrt(sum((p.grad ** 2).sum() for p in model.parameters()))
print("loss", round(loss.item(), 4))
print("grad_norm", round(g.item(), 4))
print("q_net_grad", round(model.q_net[0].weight.grad.norm().item(), 4))
