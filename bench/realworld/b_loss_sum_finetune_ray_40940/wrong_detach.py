"""LLM fine-tuning loop sums loss_sum += loss for logging: each step's graph is kept alive and memory leaks across iterations

source: https://github.com/ray-project/ray/pull/40940
symptom: memory-growth
rule: GF403
shape: training_function with a model returning an object with .loss, loss averaged per epoch for reporting
wrong: detach
why: detaches the loss itself (and re-enables grad on the copy) so that nothing holds a graph, so backward reaches no parameter and the model never trains
"""
import time
from types import SimpleNamespace

import torch
import torch.nn as nn


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(20, 8)
        self.head = nn.Linear(8, 20)

    def forward(self, input_ids, labels):
        logits = self.head(self.emb(input_ids))
        loss = nn.functional.cross_entropy(logits.view(-1, 20), labels.view(-1))
        return SimpleNamespace(loss=loss, logits=logits)


def training_function(num_steps=10):
    torch.manual_seed(0)
    model = TinyLM()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_sum = torch.tensor(0.0)
    for step in range(num_steps):
        batch = {"input_ids": torch.randint(0, 20, (2, 6)), "labels": torch.randint(0, 20, (2, 6))}
        s_fwd = time.time()
        outputs = model(**batch)
        loss = outputs.loss.detach().requires_grad_()
        loss_sum += loss.item()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return loss_sum


loss_sum = training_function()
print("mean loss:", round(loss_sum.item() / 10, 4))
print("loss_sum holds a graph:", loss_sum.grad_fn is not None)
