# The correct examples of seed 002 (leaf tensors, retain_grad, retain_graph, autograd.grad).
import torch
from torch.autograd import grad

a = torch.tensor([3.], requires_grad=True)
b = a * a
b.retain_grad()  # <- the difference
b.backward()
assert a.grad is not None
assert b.grad is not None

a = torch.tensor([3.], requires_grad=True)
b = a * a
b.retain_grad()
b.backward(retain_graph=True)
b.backward(retain_graph=True)
b.backward(retain_graph=False)
print(a.grad)  # tensor([18.])

a = torch.tensor([3.], requires_grad=True)
b = a * a * a
db_da = grad(b, a, create_graph=True)[0]
d2b_da2 = grad(db_da, a, create_graph=True)[0]
assert d2b_da2.item() == 18

a = torch.tensor([5.], requires_grad=True)
b = torch.tensor([5.], requires_grad=True)
c = torch.tensor([5.], requires_grad=False)
d = torch.sin(a * b * c)
assert d.requires_grad == any((x.requires_grad for x in (a, b, c)))
