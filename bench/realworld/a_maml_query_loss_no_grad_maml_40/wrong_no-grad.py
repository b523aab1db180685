"""MAML meta-step backpropagates a query loss that was computed under `with torch.no_grad()` (update_step=1)

source: https://github.com/dragen1860/MAML-Pytorch/issues/40
symptom: error
rule: none
shape: meta-learner forward: inner update with autograd.grad, query losses accumulated in a list, the post-update one inside no_grad
wrong: no-grad
why: keeps the query forward under no_grad and forces requires_grad on the loss, so backward runs but the meta-parameters get no gradient
"""
import torch
import torch.nn.functional as F
from torch import nn, optim


class Learner(nn.Module):
    def __init__(self, n_in, n_way):
        super().__init__()
        self.vars = nn.ParameterList([nn.Parameter(torch.randn(n_way, n_in) * 0.1), nn.Parameter(torch.zeros(n_way))])

    def forward(self, x, vars=None, bn_training=True):
        if vars is None:
            vars = self.vars
        w, b = vars[0], vars[1]
        return F.linear(x, w, b)

    def parameters(self):
        """
        override this function since initial parameters will return with a generator.
        :return:
        """
        return self.vars


class Meta(nn.Module):
    def __init__(self, update_lr, meta_lr, update_step, n_in, n_way):
        super(Meta, self).__init__()
        self.update_lr = update_lr
        self.meta_lr = meta_lr
        self.update_step = update_step
        self.net = Learner(n_in, n_way)
        self.meta_optim = optim.Adam(self.net.parameters(), lr=self.meta_lr)

    def forward(self, x_spt, y_spt, x_qry, y_qry):
        task_num = x_spt.size(0)
        losses_q = [0 for _ in range(self.update_step + 1)]  # losses_q[i] is the loss on step i

        for i in range(task_num):
            # 1. run the i-th task and compute loss for k=0
            logits = self.net(x_spt[i], vars=None, bn_training=True)
            loss = F.cross_entropy(logits, y_spt[i])
            grad = torch.autograd.grad(loss, self.net.parameters())
            fast_weights = list(map(lambda p: p[1] - self.update_lr * p[0], zip(grad, self.net.parameters())))

            # this is the loss and accuracy before first update
            with torch.no_grad():
                logits_q = self.net(x_qry[i], self.net.parameters(), bn_training=True)
                loss_q = F.cross_entropy(logits_q, y_qry[i])
                losses_q[0] += loss_q

            # this is the loss and accuracy after the first update
            with torch.no_grad():
                logits_q = self.net(x_qry[i], fast_weights, bn_training=True)
                loss_q = F.cross_entropy(logits_q, y_qry[i])
                losses_q[1] += loss_q

            for k in range(1, self.update_step):
                logits = self.net(x_spt[i], fast_weights, bn_training=True)
                loss = F.cross_entropy(logits, y_spt[i])
                grad = torch.autograd.grad(loss, fast_weights)
                fast_weights = list(map(lambda p: p[1] - self.update_lr * p[0], zip(grad, fast_weights)))
                logits_q = self.net(x_qry[i], fast_weights, bn_training=True)
                loss_q = F.cross_entropy(logits_q, y_qry[i])
                losses_q[k + 1] += loss_q

        # end of all tasks
        # sum over all losses on query set across all tasks
        loss_q = losses_q[-1] / task_num
        loss_q.requires_grad_()

        # optimize theta parameters
        self.meta_optim.zero_grad()
        loss_q.backward()
        self.meta_optim.step()
        return loss_q.item()


torch.manual_seed(0)
maml = Meta(update_lr=0.4, meta_lr=1e-3, update_step=1, n_in=5, n_way=3)
x_spt, y_spt = torch.randn(2, 6, 5), torch.randint(0, 3, (2, 6))
x_qry, y_qry = torch.randn(2, 9, 5), torch.randint(0, 3, (2, 9))
loss = maml(x_spt, y_spt, x_qry, y_qry)
print(round(loss, 4), round(maml.net.vars[0].norm().item(), 4))
