"""The meta-learner's inner update takes torch.autograd.grad of the inner loss without create_graph=True, so the meta-gradient treats the inner gradients as constants and the layers fixed in the inner loop get only the first-order meta-gradient.

source: https://github.com/uvm-neurobotics-lab/ANML/issues/3
symptom: silent
rule: ?
shape: meta-learning (OML/ANML style): functional learner over a ParameterList with a neuromodulatory gate, inner SGD steps on fast weights of the learnable layers, meta step with Adam on a query batch, several meta-iterations
"""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import optim

torch.manual_seed(0)


class Learner(nn.Module):
    def __init__(self):
        super().__init__()
        self.vars = nn.ParameterList()
        for out_f, in_f in [(16, 10), (16, 10), (5, 16)]:  # nm gate, features, fc
            w = nn.Parameter(torch.ones(out_f, in_f))
            torch.nn.init.kaiming_normal_(w)
            self.vars.append(w)
            self.vars.append(nn.Parameter(torch.zeros(out_f)))

    def forward(self, x, vars=None, bn_training=False):
        if vars is None:
            vars = self.vars
        nm_w, nm_b, w, b, fc_w, fc_b = vars
        fc_mask = torch.sigmoid(F.linear(x, nm_w, nm_b))
        h = F.relu(F.linear(x, w, b)) * fc_mask
        return F.linear(h, fc_w, fc_b)

    def parameters(self):
        return self.vars


class MetaLearingClassification(nn.Module):
    def __init__(self, update_lr, meta_lr, update_step):
        super().__init__()
        self.update_lr = update_lr
        self.meta_lr = meta_lr
        self.update_step = update_step
        self.net = Learner()
        self.optimizer = optim.Adam(self.net.parameters(), lr=self.meta_lr)

    def inner_update(self, x, fast_weights, y, bn_training):
        logits = self.net(x, fast_weights, bn_training=bn_training)
        loss = F.cross_entropy(logits, y)

        if fast_weights is None:
            fast_weights = self.net.parameters()

        grad = torch.autograd.grad(loss, fast_weights, allow_unused=False, create_graph=True)

        fast_weights = list(
            map(lambda p: p[1] - self.update_lr * p[0] if p[1].learn else p[1], zip(grad, fast_weights)))

        for params_old, params_new in zip(self.net.parameters(), fast_weights):
            params_new.learn = params_old.learn

        return fast_weights

    def meta_loss(self, x, fast_weights, y, bn_training):
        logits = self.net(x, fast_weights, bn_training=bn_training)
        loss_q = F.cross_entropy(logits, y)
        return loss_q, logits

    def forward(self, x_traj, y_traj, x_rand, y_rand):
        fast_weights = self.inner_update(x_traj[0], None, y_traj[0], False)
        for k in range(1, self.update_step):
            fast_weights = self.inner_update(x_traj[k], fast_weights, y_traj[k], False)

        meta_loss, logits = self.meta_loss(x_rand[0], fast_weights, y_rand[0], False)

        self.net.zero_grad()
        meta_loss.backward()
        self.last_nm_grad = self.net.vars[0].grad.norm().item()
        self.optimizer.step()
        return meta_loss


def freeze_layers(rln, maml):
    for i, p in enumerate(maml.net.parameters()):
        p.learn = i >= rln


maml = MetaLearingClassification(update_lr=0.1, meta_lr=3e-3, update_step=5)
freeze_layers(4, maml)
centers = torch.randn(5, 10) * 2
nm0 = maml.net.vars[0].detach().clone()
for it in range(10):
    y_traj = torch.arange(5).repeat_interleave(2).view(5, 2)
    x_traj = centers[y_traj] + torch.randn(5, 2, 10)
    y_rand = torch.randint(0, 5, (1, 20))
    x_rand = centers[y_rand] + torch.randn(1, 20, 10)
    meta_loss = maml(x_traj, y_traj, x_rand, y_rand)
print("meta_loss", round(meta_loss.item(), 4))
print("nm_grad_norm", round(maml.last_nm_grad, 4))
print("nm_drift", round((maml.net.vars[0] - nm0).norm().item(), 4))
