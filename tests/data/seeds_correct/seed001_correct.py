# The correct examples of seed 001.
import torch

# 方法一: change the values through .data
a = torch.tensor([10., 5., 2., 3.], requires_grad=True)
a.data.fill_(10.)
loss = (a * a).mean()
loss.backward()
print(a.grad)

# 方法二: change them under no_grad
a = torch.tensor([10., 5., 2., 3.], requires_grad=True)
with torch.no_grad():
    a[:] = 10.
loss = (a * a).mean()
loss.backward()
print(a.grad)

w = torch.FloatTensor(10)
w.requires_grad = True
w.data = w.data.normal_()

# the in-place write happens before the tensor is used: fine
x = torch.FloatTensor([[1., 2.]])
w1 = torch.FloatTensor([[2.], [1.]])
w2 = torch.FloatTensor([3.])
w1.requires_grad = True
w2.requires_grad = True
d = torch.matmul(x, w1)
d[:] = 1
f = torch.matmul(d, w2)
f.backward()
