"""y = x/div then y[mask] drops the inf entry from the loss, but x.grad is nan there instead of 0

source: https://github.com/pytorch/pytorch/issues/4132
symptom: nan-grad
rule: GF301
shape: module-level script with Variable: division by a tensor containing 0, masked afterwards
wrong: clamp-eps
why: adds an eps to the divisor, which is large enough to bias the kept quotient and its gradient (1/1.001 instead of 1)
"""
import torch
from torch.autograd import Variable

x = Variable(torch.FloatTensor([1.,1]), requires_grad=True)
div = Variable(torch.FloatTensor([0.,1]))

mask = (div!=0) # => mask is [0, 1]
y = x/(div + 1e-3) # eps keeps the masked-out quotient finite
loss = y[mask]

loss.backward()
print(x.grad) # grad is [nan, 1], but expected [0, 1]
