"""The inner-loop gradient is taken with torch.autograd.grad without create_graph=True, so the meta-gradient silently drops the second-order path and the representation (RLN) weights get only a first-order update.

source: https://github.com/kjaved0/mrcl/issues/15
symptom: silent
rule: ?
shape: meta-learning (OML/MAML-style): functional Learner with fast weights, inner SGD steps on the prediction layers only, meta loss backward + Adam on all weights
wrong: retain-graph
why: retain_graph=True only keeps the forward graph alive; without create_graph the inner gradients are still constants, so the meta-gradient stays first-order and the RLN gradient is unchanged from the bug.
"""
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn, optim

torch.manual_seed(0)


class Learner(nn.Module):
    """Two RLN layers (meta-learned only) followed by two PLN layers (adapted in the inner loop)."""

    def __init__(self, config):
        super(Learner, self).__init__()
        self.vars = nn.ParameterList()
        for i, (name, out_f, in_f, learn) in enumerate(config):
            w = nn.Parameter(torch.empty(out_f, in_f))
            torch.nn.init.kaiming_normal_(w)
            b = nn.Parameter(torch.zeros(out_f))
            w.learn = learn
            b.learn = learn
            self.vars.append(w)
            self.vars.append(b)
        self.config = config

    def forward(self, x, vars=None, bn_training=True):
        if vars is None:
            vars = self.vars
        idx = 0
        for i, (name, out_f, in_f, learn) in enumerate(self.config):
            w, b = vars[idx], vars[idx + 1]
            x = F.linear(x, w, b)
            if i < len(self.config) - 1:
                x = F.relu(x)
            idx += 2
        return x

    def parameters(self):
        return self.vars


class MetaLearingClassification(nn.Module):
    def __init__(self, args, config):
        super(MetaLearingClassification, self).__init__()
        self.update_lr = args["update_lr"]
        self.meta_lr = args["meta_lr"]
        self.update_step = args["update_step"]
        self.net = Learner(config)
        self.optimizer = optim.Adam(self.net.parameters(), lr=self.meta_lr)

    def clip_grad_params(self, params, norm=500):
        for p in params.parameters():
            g = p.grad
            g = (g * (g < norm).float()) + ((g > norm).float()) * norm
            g = (g * (g > -norm).float()) - ((g < -norm).float()) * norm
            p.grad = g

    def inner_update(self, x, fast_weights, y, bn_training):
        logits = self.net(x, fast_weights, bn_training=bn_training)
        loss = F.cross_entropy(logits, y)
        if fast_weights is None:
            fast_weights = self.net.parameters()
        grad = torch.autograd.grad(loss, fast_weights, retain_graph=True)
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
        meta_losses = [0 for _ in range(self.update_step + 1)]

        # Doing a single inner update to get updated weights
        fast_weights = self.inner_update(x_traj[0], None, y_traj[0], True)

        with torch.no_grad():
            meta_loss, last_layer_logits = self.meta_loss(x_rand[0], self.net.parameters(), y_rand[0], False)
            meta_losses[0] += meta_loss
            meta_loss, last_layer_logits = self.meta_loss(x_rand[0], fast_weights, y_rand[0], False)
            meta_losses[1] += meta_loss

        for k in range(1, self.update_step):
            # Doing inner updates using fast weights
            fast_weights = self.inner_update(x_traj[k], fast_weights, y_traj[k], True)
            # Computing meta-loss with respect to latest weights
            meta_loss, logits = self.meta_loss(x_rand[0], fast_weights, y_rand[0], False)
            meta_losses[k + 1] += meta_loss

        # Taking the meta gradient step
        self.optimizer.zero_grad()
        meta_loss = meta_losses[-1]
        meta_loss.backward()
        rln_grad = torch.cat([p.grad.flatten() for p in self.net.parameters() if not p.learn]).norm()
        pln_grad = torch.cat([p.grad.flatten() for p in self.net.parameters() if p.learn]).norm()
        self.clip_grad_params(self.net, norm=5)
        self.optimizer.step()
        return meta_losses, rln_grad, pln_grad


config = [("linear", 16, 8, False), ("linear", 16, 16, False), ("linear", 16, 16, True), ("linear", 5, 16, True)]
maml = MetaLearingClassification({"update_lr": 0.1, "meta_lr": 1e-3, "update_step": 4}, config)

for step in range(2):
    x_traj = torch.randn(4, 5, 8)
    y_traj = torch.randint(0, 5, (4, 5))
    x_rand = torch.randn(1, 10, 8)
    y_rand = torch.randint(0, 5, (1, 10))
    meta_losses, rln_grad, pln_grad = maml(x_traj, y_traj, x_rand, y_rand)

print("meta loss", round(meta_losses[-1].item(), 4))
print("RLN grad norm", round(rln_grad.item(), 4))
print("PLN grad norm", round(pln_grad.item(), 4))
