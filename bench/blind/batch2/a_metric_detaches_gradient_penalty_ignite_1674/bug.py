"""The Loss metric detaches the prediction before calling the loss function, so a DUQ-style loss whose gradient penalty differentiates the prediction with respect to the input fails in evaluation.

source: https://github.com/pytorch/ignite/issues/1674 (fix PR #1675, commit 7b4da22)
symptom: error
rule: ?
shape: metric class (Loss with reset/update/compute) fed by an evaluation loop that enables input gradients; the loss function adds a gradient penalty computed with torch.autograd.grad(create_graph=True)
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class Loss:
    def __init__(self, loss_fn, batch_size=lambda x: len(x)):
        self._loss_fn = loss_fn
        self._batch_size = batch_size
        self.reset()

    def reset(self):
        self._sum = torch.tensor(0.0)
        self._num_examples = 0

    def update(self, output):
        if len(output) == 2:
            y_pred, y = output
            kwargs = {}
        else:
            y_pred, y, kwargs = output
        average_loss = self._loss_fn(y_pred.detach(), y.detach(), **kwargs)  # bench: bug
        if len(average_loss.shape) != 0:
            raise ValueError("loss_fn did not return the average loss.")
        n = self._batch_size(y)
        self._sum += average_loss * n
        self._num_examples += n

    def compute(self):
        return self._sum.item() / self._num_examples


def calc_gradients_input(x, y_pred):
    gradients = torch.autograd.grad(outputs=y_pred, inputs=x, grad_outputs=torch.ones_like(y_pred), create_graph=True)[0]
    return gradients.flatten(start_dim=1)


def calc_gradient_penalty(x, y_pred):
    gradients = calc_gradients_input(x, y_pred)
    grad_norm = gradients.norm(2, dim=1)
    return ((grad_norm - 1) ** 2).mean()


l_gradient_penalty = 0.5


def duq_loss(y_pred, y, x):
    bce = F.binary_cross_entropy(y_pred, F.one_hot(y, 3).float())
    return bce + l_gradient_penalty * calc_gradient_penalty(x, y_pred)


model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 3), nn.Sigmoid())
metric = Loss(duq_loss)


def eval_step(x, y):
    model.eval()
    x.requires_grad_(True)
    y_pred = model(x)
    return y_pred, y, {"x": x}


batches = [(torch.randn(8, 4), torch.randint(0, 3, (8,))), (torch.randn(3, 4), torch.randint(0, 3, (3,)))]
metric.reset()
for x, y in batches:
    metric.update(eval_step(x, y))

print("validation loss", round(metric.compute(), 4))
