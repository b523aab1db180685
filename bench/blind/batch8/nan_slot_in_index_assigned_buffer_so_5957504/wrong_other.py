"""Both results are written into one nan-filled buffer by index assignment, so backpropagating the finite element also runs the backward of the nan element (0 * nan) and the gradient becomes nan.

source: https://whosebug.com/question/5957504/PyTorch-backward-on-a-tensor-element-affected-by-nan-in-other-elements
symptom: nan-grad
rule: ?
shape: flat script: two scalar leaves, one element computed as x*y/y (nan at y=0, kept on purpose), the other as x+y, both stored into a buffer with z[i] = ..., loss on z[1], SGD steps on x
wrong: other
why: replacing the nan gradients with torch.nan_to_num hooks gives finite numbers, but the whole x/y gradient was nan (0*nan plus the real 1), so it becomes 0 instead of the true gradient and x never moves.
"""
import torch

torch.manual_seed(0)

x = torch.tensor(1., requires_grad=True)
y = torch.tensor(0., requires_grad=True)
opt = torch.optim.SGD([x], lr=0.1)
target = torch.tensor(3.0)
x.register_hook(torch.nan_to_num)
y.register_hook(torch.nan_to_num)

for step in range(3):
    opt.zero_grad()
    z = torch.full((2, ), float("nan"))
    z[0] = x * y / y
    z[1] = x + y
    loss = (z[1] - target) ** 2
    loss.backward()
    opt.step()

print("z0", z[0].item())
print("loss", round(loss.item(), 4))
print("x.grad", round(x.grad.item(), 4))
print("y.grad", round(y.grad.item(), 4))
