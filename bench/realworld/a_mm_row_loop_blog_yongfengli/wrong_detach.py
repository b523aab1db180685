"""Adds 1 to the rows of a matmul output in a loop while the next matmul saved it

source: https://www.yongfengli.tk/2018/04/13/inplace-operation-in-pytorch.html
symptom: error
rule: GF204
shape: nn.Module forward with a loop `b[i] = b[i] + 1` then `torch.mm(self.param, b)` in the same loop
wrong: detach
why: adds to b through `.data`, so every matmul's saved b is the final one and the parameter gradient is wrong
"""
import torch
import torch.nn as nn
from torch.autograd import Variable


class Model(nn.Module):
    def __init__(self):
        super(Model, self).__init__()
        self.param = nn.Parameter(torch.randn(10, 10) * 0.1)

    def forward(self, a):
        b = Variable(torch.Tensor(10, 1))
        y = 0
        b = torch.mm(self.param, a)
        for i in range(10):
            b.data[i] += 1  # no version bump
            y = y + torch.mm(self.param, b)
        return y


torch.manual_seed(0)
model = Model()
a = torch.randn(10, 1)
y = model(a)
loss = y.sum()
loss.backward()
print(round(loss.item(), 4), round(model.param.grad.norm().item(), 4))
