"""Both results are written into one nan-filled buffer by index assignment, so backpropagating the finite element also runs the backward of the nan element (0 * nan) and the gradient becomes nan.

source: https://whosebug.com/question/5957504/PyTorch-backward-on-a-tensor-element-affected-by-nan-in-other-elements
symptom: nan-grad
rule: ?
shape: flat script: two scalar leaves, one element computed as x*y/y (nan at y=0, kept on purpose), the other as x+y, both stored into a buffer with z[i] = ..., loss on z[1], SGD steps on x
"""
import torch

torch.manual_seed(0)

x = torch.tensor(1., requires_grad=True)
y = torch.tensor(0., requires_grad=True)
opt = torch.optim.SGD([x], lr=0.1)
target = torch.tensor(3.0)

for step in range(3):
    opt.zero_grad()
    z = torch.full((2, ), float("nan"))
    z[0] = x * y / y  # bench: bug
    z[1] = x + y  # bench: bug
    loss = (z[1] - target) ** 2  # bench: bug
    loss.backward()
    opt.step()

print("z0", z[0].item())
print("loss", round(loss.item(), 4))
print("x.grad", round(x.grad.item(), 4))
print("y.grad", round(y.grad.item(), 4))
