"""Per-relation weights are nn.Parameters kept in a plain Python dict on the module, so model.parameters() does not list them, the optimizer never sees them, and they stay at their initial values.

source: https://github.com/pytorch/pytorch/issues/10817
symptom: no-training
rule: ?
shape: relational scoring nn.Module (shared nn.Linear encoder + per-relation weight/bias Parameters stored in a dict), BCE loss, Adam training loop, several steps
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class RelationScorer(nn.Module):
    def __init__(self, num_features=8, num_relations=3):
        super().__init__()
        self.encoder = nn.Linear(num_features, 4)
        self.d = dict()
        for rel in range(num_relations):
            self.d['w%d' % rel] = nn.Parameter(torch.randn(4) * 0.1)
            self.d['b%d' % rel] = nn.Parameter(torch.zeros(1))
        for name, p in self.d.items():
            self.register_parameter(name, p)

    def forward(self, x, rel):
        h = torch.tanh(self.encoder(x))
        return h @ self.d['w%d' % rel] + self.d['b%d' % rel]


model = RelationScorer()
optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
x = torch.randn(16, 8)
labels = [(x[:, r] > 0).float() for r in range(3)]
w0_init = model.d['w0'].detach().clone()

for step in range(10):
    optimizer.zero_grad()
    loss = sum(F.binary_cross_entropy_with_logits(model(x, r), labels[r]) for r in range(3))
    loss.backward()
    optimizer.step()

print("loss", round(loss.item(), 4))
print("registered params", len(list(model.parameters())))
print("w0 change", round((model.d['w0'].detach() - w0_init).norm().item(), 4))
