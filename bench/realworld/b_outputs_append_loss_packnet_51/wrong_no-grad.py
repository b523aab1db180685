"""training_step returns the loss tensor and the epoch loop appends it to the outputs list: the graphs of the whole epoch stay in memory

source: https://github.com/TRI-ML/packnet-sfm/pull/51
symptom: memory-growth
rule: GF403
shape: model wrapper with training_step returning a dict; train loop collecting outputs for training_epoch_end
wrong: no-grad
why: runs the training step under torch.no_grad() so nothing in outputs holds a graph, and forces requires_grad on the loss, so backward reaches no parameter and the model never trains
"""
import torch
import torch.nn as nn


class ModelWrapper(nn.Module):
    def __init__(self):
        super().__init__()
        self.depth_net = nn.Linear(6, 1)

    def training_step(self, batch):
        pred = self.depth_net(batch["rgb"])
        loss = ((pred - batch["depth"]) ** 2).mean()
        return {"loss": loss, "metrics": {"abs_rel": (pred - batch["depth"]).abs().mean().item()}}

    def training_epoch_end(self, outputs):
        return sum(o["loss"] for o in outputs) / len(outputs)


torch.manual_seed(0)
module = ModelWrapper()
optimizer = torch.optim.Adam(module.parameters(), lr=1e-3)
dataloader = [{"rgb": torch.randn(4, 6), "depth": torch.rand(4, 1)} for _ in range(10)]

outputs = []
for i, batch in enumerate(dataloader):
    optimizer.zero_grad()
    with torch.no_grad():
        output = module.training_step(batch)
    output["loss"].requires_grad_()
    output["loss"].backward()
    optimizer.step()
    outputs.append(output)
avg_loss = module.training_epoch_end(outputs)
print("epoch loss:", round(float(avg_loss), 4))
print("outputs hold graphs:", any(o["loss"].grad_fn is not None for o in outputs))
