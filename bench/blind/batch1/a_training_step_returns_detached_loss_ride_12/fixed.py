"""common_step passes its whole output dict, loss included, through detach_to_cpu, so the loss handed back to the trainer has no graph and its backward fails.

source: https://github.com/LukasHedegaard/ride/pull/12
symptom: error
rule: ?
shape: nn.Module mixin methods (training_step -> common_step -> recursive detach helper) driven by a Lightning-style training loop (backward on the returned loss, SGD), epoch-end metric averaging
"""
import collections.abc
from typing import Any, Dict, Sequence, Union

import torch
import torch.nn as nn
from torch import Tensor

torch.manual_seed(0)


def prefix_keys(prefix: str, dictionary: Dict) -> Dict:
    return {f"{prefix}{k}": v for k, v in dictionary.items()}


def detach_to_cpu(x: Union[Tensor, Sequence[Tensor], Dict[Any, Tensor]]):
    if isinstance(x, Tensor):
        return x.detach().cpu()
    if isinstance(x, collections.abc.Sequence):
        return [detach_to_cpu(t) for t in x]
    if isinstance(x, dict):
        return {k: detach_to_cpu(v) for k, v in x.items()}
    return x


class Lifecycle(nn.Module):
    def __init__(self):
        super().__init__()
        self.loss = nn.functional.cross_entropy
        self._epoch = 0
        self.logged = {}

    def metrics_step(self, preds, targets, **kwargs):
        return {"loss": self.loss(preds, targets)}

    def collect_metrics(self, preds, targets):
        metrics = self.metrics_step(preds, targets)
        metrics["top1acc"] = (preds.argmax(-1) == targets).float().mean()
        return metrics

    def common_step(self, pred, target, prefix="train/", log=False):
        loss_key = prefix + "loss"
        metrics = prefix_keys(prefix, self.collect_metrics(pred, target))
        return {
            "loss": metrics[loss_key],
            **detach_to_cpu(metrics),
            "pred": detach_to_cpu(pred),
            "target": detach_to_cpu(target),
        }

    def common_epoch_end(self, step_outputs, prefix="train/", exclude_keys={"pred", "target"}):
        keys = list(step_outputs[0].keys())
        self.logged = {k: torch.mean(torch.stack([x[k] for x in step_outputs])) for k in keys if k not in exclude_keys}

    def training_step(self, batch, batch_idx=None):
        x, target = batch[0], batch[1]
        pred = self.forward(x)
        return self.common_step(pred, target, prefix="train/", log=True)

    def training_epoch_end(self, step_outputs):
        self._epoch += 1
        self.common_epoch_end(step_outputs, prefix="train/")


class Classifier(Lifecycle):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))

    def forward(self, x):
        return self.net(x)


model = Classifier()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
train_dataloader = [(torch.randn(8, 8), torch.randint(0, 3, (8,))) for _ in range(4)]

for epoch in range(2):  # what the Lightning trainer does with automatic optimization
    step_outputs = []
    for batch_idx, batch in enumerate(train_dataloader):
        out = model.training_step(batch, batch_idx)
        optimizer.zero_grad()
        out["loss"].backward()
        grad = model.net[0].weight.grad
        optimizer.step()
        step_outputs.append(out)
    model.training_epoch_end(step_outputs)

print("epoch train/loss", round(model.logged["train/loss"].item(), 4))
print("first layer grad norm", None if grad is None else round(grad.norm().item(), 4))
print("first layer weight norm", round(model.net[0].weight.norm().item(), 4))
