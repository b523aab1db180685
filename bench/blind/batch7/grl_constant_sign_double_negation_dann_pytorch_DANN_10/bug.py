"""The gradient-reversal Function already negates the gradient, but the schedule uses gamma = -10, so the constant is negative too and the two signs cancel: the feature extractor is trained to help the domain classifier instead of fooling it.

source: https://github.com/CuthbertCai/pytorch_DANN/issues/10
symptom: silent
rule: ?
shape: custom autograd.Function (GradReverse) inside a DANN model (extractor / class classifier / domain classifier nn.Modules), SGD training step
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)

gamma = -10  # bench: bug


class GradReverse(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, constant):
        ctx.constant = constant
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output.neg() * ctx.constant, None


class Extractor(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 16), nn.ReLU())

    def forward(self, x):
        return self.fc(x)


class ClassClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 3)

    def forward(self, x):
        return F.log_softmax(self.fc(x), 1)


class DomainClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 16)
        self.fc2 = nn.Linear(16, 2)

    def forward(self, x, constant):
        x = GradReverse.apply(x, constant)
        return F.log_softmax(self.fc2(F.relu(self.fc1(x))), 1)


extractor, class_clf, domain_clf = Extractor(), ClassClassifier(), DomainClassifier()
params = list(extractor.parameters()) + list(class_clf.parameters()) + list(domain_clf.parameters())
optimizer = torch.optim.SGD(params, lr=0.1)
src_x, src_y = torch.randn(16, 10), torch.randint(0, 3, (16,))
tgt_x = torch.randn(16, 10) + 1.0
for step in range(5):
    p = (step + 1) / 5
    constant = 2.0 / (1.0 + np.exp(-gamma * p)) - 1
    optimizer.zero_grad()
    class_loss = F.nll_loss(class_clf(extractor(src_x)), src_y)
    feats = extractor(torch.cat([src_x, tgt_x]))
    domain_labels = torch.cat([torch.zeros(16), torch.ones(16)]).long()
    domain_loss = F.nll_loss(domain_clf(feats, constant), domain_labels)
    loss = class_loss + domain_loss
    loss.backward()
    optimizer.step()
print("class loss", round(class_loss.item(), 4))
print("domain loss", round(domain_loss.item(), 4))
print("extractor grad", round(extractor.fc[0].weight.grad.norm().item(), 4))
print("domain clf grad", round(domain_clf.fc1.weight.grad.norm().item(), 4))
