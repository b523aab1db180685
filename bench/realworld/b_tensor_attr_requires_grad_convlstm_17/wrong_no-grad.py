"""ConvLSTM peephole weights created as plain tensors with requires_grad=True instead of nn.Parameter: Adam(model.parameters()) never updates them

source: https://github.com/automan000/Convolutional_LSTM_PyTorch/issues/17
symptom: no-training
rule: none
shape: nn.Module (Net) with a tensor attribute set up in __init__, optimizer built from model.parameters()
wrong: no-grad
why: registers w as a buffer so it follows the module, but a buffer does not require grad and w is never trained
"""
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super(Net, self).__init__()
        self.register_buffer("w", torch.rand(2, 2))
        self.fc = nn.Linear(2, 2)

    def forward(self, x):
        return self.fc(x @ self.w)


torch.manual_seed(0)
net = Net()
optimizer = torch.optim.Adam(net.parameters(), lr=0.1)
x = torch.randn(4, 2)
before = net.w.detach().clone()
for _ in range(3):
    optimizer.zero_grad()
    net(x).sum().backward()
    optimizer.step()
print("parameters:", [name for name, _ in net.named_parameters()])
print("w changed:", not torch.equal(before, net.w.detach()))
