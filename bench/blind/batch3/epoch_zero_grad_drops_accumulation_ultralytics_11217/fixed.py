"""The trainer calls optimizer.zero_grad() at the start of every epoch although its optimizer_step() already zeroes after each step, so the gradients accumulated over the last batches of an epoch (fewer than `accumulate`) are thrown away.

source: https://github.com/ultralytics/ultralytics/pull/11217
symptom: silent
rule: ?
shape: trainer class with gradient accumulation (_do_train epoch loop, optimizer_step method doing clip, step and zero_grad every `accumulate` batches)
"""
import torch
import torch.nn as nn

torch.manual_seed(0)


class BaseTrainer:
    def __init__(self, model, nb=5, accumulate=2, epochs=2):
        self.model = model
        self.optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        self.nb, self.accumulate, self.epochs = nb, accumulate, epochs
        self.data = [(torch.randn(4, 6), torch.randint(0, 3, (4,))) for _ in range(nb)]

    def optimizer_step(self):
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm=10.0)
        self.optimizer.step()
        self.optimizer.zero_grad()

    def _do_train(self):
        last_opt_step = -1
        self.optimizer.zero_grad()
        for epoch in range(self.epochs):
            for i, (x, y) in enumerate(self.data):
                ni = i + self.nb * epoch
                self.loss = nn.functional.cross_entropy(self.model(x), y)
                self.loss.backward()
                if ni - last_opt_step >= self.accumulate:
                    self.optimizer_step()
                    last_opt_step = ni
        return self.loss


model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
trainer = BaseTrainer(model)
loss = trainer._do_train()
pending = torch.sqrt(sum([(p.grad ** 2).sum() for p in model.parameters() if p.grad is not None], torch.tensor(0.0)))
print("loss", round(loss.item(), 4))
print("weight_norm", round(model[0].weight.norm().item(), 4))
print("pending_grad", round(pending.item(), 4))
