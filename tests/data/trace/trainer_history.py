import torch


class Trainer:
    def __init__(self):
        self.model = torch.nn.Linear(2, 1)
        self.history = {}

    def step(self, i):
        loss = self.model(torch.randn(4, 2)).pow(2).mean()
        loss.backward()
        self.history[i] = loss * 1.0  # GF403: a dict of graphs


torch.manual_seed(0)
trainer = Trainer()
for i in range(4):
    trainer.step(i)
print(len(trainer.history))
