"""After the pruning speedup replaces the masked layers with smaller new modules, fine-tuning keeps using the optimizer built on the old parameters, so the new layers are never updated.

source: https://github.com/microsoft/nni/issues/4521
symptom: no-training
rule: ?
shape: pruning script: model, optimizer, mask-based pruner, speedup that swaps submodules for smaller ones, then a fine-tuning loop
"""
import torch
import torch.nn as nn

torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 16)
        self.fc3 = nn.Linear(16, 3)

    def forward(self, x):
        return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


def speedup_model(model, keep):
    """Replace fc1/fc2 with smaller layers that keep only the unmasked fc1 output channels."""
    new_fc1 = nn.Linear(model.fc1.in_features, len(keep))
    new_fc2 = nn.Linear(len(keep), model.fc2.out_features)
    with torch.no_grad():
        new_fc1.weight.copy_(model.fc1.weight[keep])
        new_fc1.bias.copy_(model.fc1.bias[keep])
        new_fc2.weight.copy_(model.fc2.weight[:, keep])
        new_fc2.bias.copy_(model.fc2.bias)
    model.fc1, model.fc2 = new_fc1, new_fc2


def trainer(model, optimizer, x, y, steps):
    for _ in range(steps):
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
    return loss


model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
x, y = torch.randn(32, 8), torch.randint(0, 3, (32,))
trainer(model, optimizer, x, y, 2)

keep = model.fc1.weight.norm(dim=1).argsort(descending=True)[:8]  # L1/L2-norm pruning: keep half
speedup_model(model, keep)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
w1 = model.fc1.weight.detach().clone()
loss = trainer(model, optimizer, x, y, 4)

print("loss", round(loss.item(), 4))
print("fc1_change", round((model.fc1.weight - w1).norm().item(), 4))
print("fc3_grad", round(model.fc3.weight.grad.norm().item(), 4))
