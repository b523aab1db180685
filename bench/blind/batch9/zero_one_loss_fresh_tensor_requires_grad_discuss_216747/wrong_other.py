"""The user's 0-1 loss returns a freshly built `torch.tensor(..., requires_grad=True)` from an if-else on `input.equal(target)`, which is not connected to the model, so the model's parameters never get a gradient.

source: https://discuss.pytorch.org/t/built-in-0-1-loss-function/216747
symptom: none-grad
rule: ?
shape: flat training script: linear binary classifier, custom nn.Module loss applied per sample, SGD loop over several steps
wrong: other
why: adding `0 * input.sum()` attaches the loss to the graph so `.grad` is filled, but the gradient is identically zero and the classifier never learns.
"""
import torch
import torch.nn as nn

torch.manual_seed(0)


class ZeroOneLoss(torch.nn.Module):
    def __init__(self):
        super(ZeroOneLoss, self).__init__()

    def forward(self, input, target):
        if input.equal(target):
            loss = torch.tensor(0.)
        else:
            loss = torch.tensor(1.)
        return loss + 0.0 * input.sum()  # attach to the graph so backward reaches the model


model = nn.Linear(4, 1)
criterion = ZeroOneLoss()
opt = torch.optim.SGD(model.parameters(), lr=0.5)
x = torch.randn(32, 4)
y = (x[:, :1] + 0.5 * x[:, 1:2] > 0).float()
w0 = model.weight.detach().clone()
for step in range(20):
    opt.zero_grad()
    prob = torch.sigmoid(model(x))
    loss = sum(criterion(prob[i].round(), y[i]) for i in range(len(x))) / len(x)
    loss.backward()
    opt.step()
g = model.weight.grad
print("loss", round(loss.item(), 4))
print("weight_grad", None if g is None else round(g.norm().item(), 4))
print("weight_drift", round((model.weight - w0).norm().item(), 4))
