"""Synthetic labels are made from `true_W` created with requires_grad=True, so every batch loss backpropagates through the same data graph

source: https://github.com/zhangyu2234/Deep-learning-by-hand
symptom: error
rule: GF401
shape: notebook-style training from scratch: data generated once with requires_grad weights, mini-batch loop with hand-written fc/sgd/loss helpers
wrong: retain-graph
why: retains the data graph instead of creating the labels without grad, so every batch backpropagates into (and accumulates gradients in) the label generator true_W/true_b
"""
import torch

torch.manual_seed(0)
# Randomly generate our training samples and train labels
num_samples = 400
num_features = 2
num_hiddens = 2
# train samples
X = torch.randn((num_samples, num_features), dtype=torch.float32)
true_W = torch.randn((num_hiddens, 1), requires_grad=True, dtype=torch.float32)
true_b = torch.randn(1, requires_grad=True, dtype=torch.float32)
Y = torch.mm(X, true_W) + true_b


def relu(x):
    return torch.max(x, torch.zeros_like(x))


def loss(y_hat, y):
    return ((y_hat - y) ** 2 / 2).sum()


def sgd(params, lr, batch_size):
    with torch.no_grad():
        for param in params:
            param -= lr * param.grad / batch_size
            param.grad.zero_()


def DataLoader(X, Y, batch_size, shuffle=True):
    idx = torch.randperm(len(X)) if shuffle else torch.arange(len(X))
    for i in range(0, len(X), batch_size):
        j = idx[i:i + batch_size]
        yield X[j], Y[j]


# fc
def fc(x, w, b):
    return relu(torch.mm(x, w) + b)


# Randomly generate W and b and attach gradients
W = torch.normal(0, 0.01, size=(num_hiddens, 1), requires_grad=True)
b = torch.zeros(1, requires_grad=True)

batch_size = 20
lr = 0.01
num_epochs = 3

for epoch in range(num_epochs):
    for x, y in DataLoader(X, Y, batch_size, shuffle=True):
        l = loss(fc(x, W, b), y)
        l.backward(retain_graph=True)
        sgd([W, b], lr, batch_size)

print(round(l.item(), 4), [round(v, 4) for v in W.flatten().tolist()])
