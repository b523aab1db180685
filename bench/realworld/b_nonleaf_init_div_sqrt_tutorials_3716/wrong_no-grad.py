"""Xavier-style init written as torch.randn(..., requires_grad=True) / math.sqrt(784): the weights become a non-leaf and get no .grad

source: https://github.com/pytorch/tutorials/issues/3716
symptom: none-grad
rule: GF103
shape: "neural net from scratch" tutorial: hand-made weights and bias, log_softmax model, nll loss
wrong: no-grad
why: runs the scaled init under torch.no_grad(), so weights comes out as a tensor that does not require grad and gets no gradient
"""
import math

import torch

torch.manual_seed(0)
x_train = torch.randn(64, 784)
y_train = torch.randint(0, 10, (64,))

with torch.no_grad():
    weights = torch.randn(784, 10, requires_grad=True) / math.sqrt(784)
bias = torch.zeros(10, requires_grad=True)


def log_softmax(x):
    return x - x.exp().sum(-1).log().unsqueeze(-1)


def model(xb):
    return log_softmax(xb @ weights + bias)


def nll(input, target):
    return -input[range(target.shape[0]), target].mean()


loss_func = nll
loss = loss_func(model(x_train), y_train)
loss.backward()
print("loss:", round(loss.item(), 4))
print("weights.grad is None:", weights.grad is None)
print("bias.grad is None:", bias.grad is None)
