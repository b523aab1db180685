"""The weights are created with `requires_grad=True` and then cast with `.type(dtype)`, which returns a non-leaf copy, so backward never fills their `.grad`.

source: https://github.com/hhsecond/HandsOnDeepLearningWithPytorch/issues/2
symptom: none-grad
rule: ?
shape: numpy-like two-layer sigmoid network for FizzBuzz with raw weight tensors and a hand-written SGD update over mini-batches
"""
import torch

torch.manual_seed(0)

input_size = 10
hidden_size = 32
epochs = 20
batches = 64
lr = 0.01


def binary_encoder(n):
    return [n >> d & 1 for d in range(input_size)]


def fizbuz(n):
    if n % 15 == 0:
        return [1, 0, 0, 0]
    if n % 5 == 0:
        return [0, 1, 0, 0]
    if n % 3 == 0:
        return [0, 0, 1, 0]
    return [0, 0, 0, 1]


dtype = torch.DoubleTensor  # stand-in for torch.cuda.FloatTensor: .type() makes a copy
nums = list(range(101, 101 + 8 * batches))
x = torch.tensor([binary_encoder(n) for n in nums]).type(dtype)
y = torch.tensor([fizbuz(n) for n in nums]).type(dtype)

w1 = torch.randn(input_size, hidden_size, requires_grad=True).type(dtype)  # bench: bug
w2 = torch.randn(hidden_size, 4, requires_grad=True).type(dtype)  # bench: bug
b1 = torch.zeros(1, hidden_size, requires_grad=True).type(dtype)  # bench: bug
b2 = torch.zeros(1, 4, requires_grad=True).type(dtype)  # bench: bug

no_of_batches = int(len(x) / batches)
for epoch in range(epochs):
    for batch in range(no_of_batches):
        start = batch * batches
        end = start + batches
        x_ = x[start:end]
        y_ = y[start:end]

        a2 = x_.matmul(w1)
        a2 = a2.add(b1)
        h2 = a2.sigmoid()

        a3 = h2.matmul(w2)
        a3 = a3.add(b2)
        hyp = a3.sigmoid()

        error = hyp - y_
        output = error.pow(2).sum() / 2.0
        output.backward()

        with torch.no_grad():
            for p in (w1, w2, b1, b2):
                p -= lr * p.grad
                p.grad.zero_()
print("loss", round(output.item(), 4))
print("w1_norm", round(w1.norm().item(), 4))
print("b2_sum", round(b2.sum().item(), 4))
