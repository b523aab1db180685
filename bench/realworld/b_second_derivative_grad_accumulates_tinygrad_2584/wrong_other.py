"""Second derivative via y.backward(create_graph=True) then dydx.backward(): x.grad still holds dydx, so it reads dydx + d2ydx2 instead of d2ydx2

source: https://github.com/tinygrad/tinygrad/issues/2584
symptom: wrong-value
rule: GF402
shape: module-level script: first derivative read from x.grad, backpropagated again for the second derivative
wrong: other
why: zeroes x.grad in place instead of unsetting it, which zeroes dydx itself (it is the same tensor), so the second derivative comes out as 0
"""
import numpy as np
import torch
from torch import tensor as Tensor

x = Tensor(2., requires_grad=True)
y = (3.*x).exp()

# use of torch.autograd.grad is recommended instead of this...
y.backward(create_graph=True)
dydx = x.grad

x.grad.zero_()      # otherwise grad is dydx + d2ydx2
dydx.backward()
d2ydx2 = x.grad

print(round(d2ydx2.item(), 2), round((9*y).item(), 2))
print(np.isclose(d2ydx2.detach().numpy(), 9*y.detach().numpy()))
