"""Training loop tracks total_loss += loss: total_loss carries the autograd history of every iteration (the PyTorch FAQ's out-of-memory example)

source: https://github.com/google/brax/pull/152
symptom: memory-growth
rule: GF403
shape: plain training loop with optimizer, criterion and a running total used only for logging
wrong: retain-graph
why: keeps the tensor running sum and backpropagates it with retain_graph=True, so every step re-adds the gradients of all earlier steps' losses
"""
import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Linear(4, 1)
criterion = nn.MSELoss()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
input = torch.randn(32, 4)
target = torch.randn(32, 1)

total_loss = 0
for i in range(100):
    optimizer.zero_grad()
    output = model(input)
    loss = criterion(output, target)
    total_loss += loss
    total_loss.backward(retain_graph=True)
    optimizer.step()

print("total loss:", round(float(total_loss), 4))
print("total_loss holds history:", torch.is_tensor(total_loss) and total_loss.grad_fn is not None)
