"""The user reads `.grad` of the network output stored in forward (a non-leaf tensor produced by the last nn.Linear), which autograd does not keep, so it is always None.

source: https://discuss.pytorch.org/t/trying-to-understand-why-output-of-nn-linear-for-output-layer-isnt-retaining/40116
symptom: none-grad
rule: ?
shape: hand-rolled one-step RNN nn.Module (Wxh, Whh on cat(x-part, h0), Why) that stores its intermediate outputs on self, MSE loss, SGD training loop over several steps, inspecting the output gradient after backward
wrong: detach
why: making the output a fresh leaf copy fills its .grad, but the loss no longer reaches Wxh, Whh and Why, so their .grad stays None and the network never trains.
"""
import torch
import torch.nn as nn

torch.manual_seed(0)


class SingleRNN(nn.Module):
    def __init__(self, n_inputs, n_outputsize):
        super().__init__()
        numHU = 2
        bias = False
        self.Wxh = nn.Linear(in_features=n_inputs, out_features=numHU, bias=bias)
        self.Whh = nn.Linear(in_features=numHU + self.Wxh.out_features, out_features=numHU, bias=bias)
        self.Why = nn.Linear(in_features=numHU, out_features=n_outputsize, bias=bias)

    def forward(self, X0, H0):
        self.L0_X = self.Wxh(X0)
        self.L1_H = self.Whh(torch.cat((self.L0_X, H0), dim=1))
        self.L2_Y = self.Why(self.L1_H).clone().detach().requires_grad_(True)
        return self.L2_Y


model = SingleRNN(4, 3)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
X0 = torch.randn(5, 4)
H0 = torch.zeros(5, 2)
target = torch.randn(5, 3)

for step in range(3):
    optimizer.zero_grad()
    out = model(X0, H0)
    loss = ((out - target) ** 2).mean()
    loss.backward()
    optimizer.step()

g = model.L2_Y.grad
print("loss", round(loss.item(), 4))
print("output grad norm", None if g is None else round(g.norm().item(), 4))
gw = model.Wxh.weight.grad
print("Wxh grad norm", None if gw is None else round(gw.norm().item(), 4))
