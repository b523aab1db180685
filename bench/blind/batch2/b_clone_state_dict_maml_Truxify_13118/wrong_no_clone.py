"""The MAML inner loop adapts a `load_state_dict` clone of the meta-model and updates it through `param.data`, so the query loss has no path back to the meta-model's parameters, their `.grad` stays None and the outer optimizer never updates them.

source: https://github.com/KanishJebaMathewM/Truxify/issues/13118 (fix PR #13999, commit 601a839)
symptom: none-grad
rule: ?
shape: meta-learning: nn.Module regressor with a clone() method, MAML class with inner_update / outer_update / meta_train_step, synthetic linear-regression tasks, Adam outer loop
wrong: detach
why: adapting the meta-model itself through .data gives it gradients, but every inner step overwrites the meta-weights without a graph, so tasks leak into each other and the meta-gradient is taken at the wrong point.
"""

from typing import List, Tuple

import torch
import torch.nn as nn

torch.manual_seed(0)


class MAMLModel(nn.Module):
    def __init__(self, input_dim=8, hidden_dim=32, output_dim=1, num_layers=2):
        super().__init__()
        self.input_dim = input_dim
        self.hidden_dim = hidden_dim
        self.output_dim = output_dim
        self.num_layers = num_layers
        layers = [nn.Linear(input_dim, hidden_dim), nn.ReLU()]
        for _ in range(num_layers - 1):
            layers += [nn.Linear(hidden_dim, hidden_dim), nn.ReLU()]
        layers.append(nn.Linear(hidden_dim, output_dim))
        self.network = nn.Sequential(*layers)

    def forward(self, x):
        return self.network(x)

    def clone(self) -> "MAMLModel":
        clone = MAMLModel(self.input_dim, self.hidden_dim, self.output_dim, self.num_layers)
        clone.load_state_dict(self.state_dict())
        return clone


class MAML:
    def __init__(self, model: MAMLModel, inner_lr=0.05, outer_lr=0.01):
        self.model = model
        self.inner_lr = inner_lr
        self.outer_optimizer = torch.optim.Adam(self.model.parameters(), lr=outer_lr)
        self.criterion = nn.MSELoss()

    def inner_update(self, model, support_x, support_y):
        adapted_model = model
        pred = adapted_model(support_x)
        loss = self.criterion(pred, support_y)
        grads = torch.autograd.grad(loss, adapted_model.parameters(), create_graph=True)
        for param, grad in zip(adapted_model.parameters(), grads):
            param.data -= self.inner_lr * grad
        return adapted_model

    def outer_update(self, meta_loss):
        self.outer_optimizer.zero_grad()
        meta_loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.outer_optimizer.step()

    def meta_train_step(self, tasks: List[Tuple[torch.Tensor, ...]]):
        meta_loss = 0.0
        for support_x, support_y, query_x, query_y in tasks:
            adapted_model = self.inner_update(self.model, support_x, support_y)
            pred = adapted_model(query_x)
            task_loss = self.criterion(pred, query_y)
            meta_loss += task_loss
        meta_loss = meta_loss / len(tasks)
        self.outer_update(meta_loss)
        return meta_loss


def sample_tasks(num_tasks, k_shot=5, input_dim=8):
    tasks = []
    for _ in range(num_tasks):
        w = torch.randn(input_dim, 1)
        b = torch.randn(1)
        support_x = torch.randn(k_shot, input_dim)
        query_x = torch.randn(10, input_dim)
        tasks.append((support_x, support_x @ w + b, query_x, query_x @ w + b))
    return tasks


maml = MAML(MAMLModel())
first_layer = maml.model.network[0].weight
w_init = first_layer.detach().clone()
for epoch in range(3):
    meta_loss = maml.meta_train_step(sample_tasks(4))

print("meta loss", round(meta_loss.item(), 4))
print("meta grad is None", first_layer.grad is None)
print("meta grad norm", None if first_layer.grad is None else round(first_layer.grad.norm().item(), 4))
print("meta weight change", round((first_layer.detach() - w_init).norm().item(), 4))
