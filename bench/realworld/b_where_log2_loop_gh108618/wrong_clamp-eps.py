"""torch.where(x1 > 2, torch.log2(x1), 2*x1) gives a nan gradient at x=0 where the loop version gives 2

source: https://github.com/pytorch/pytorch/issues/108618
symptom: nan-grad
rule: GF302
shape: module-level script comparing torch.where against an equivalent element loop
wrong: clamp-eps
why: keeps log2 under where and replaces the nan gradient by 0 with torch.nan_to_num, which also wipes the valid gradient 2 of the 2*x1 branch at x1 = 0
"""
import torch

x1 = torch.tensor([0.0, 2.0, 3.0], requires_grad=True)
x2 = torch.tensor([0.0, 2.0, 3.0], requires_grad=True)

# Use torch.where to conditionally apply an operation
y1 = torch.where(x1 > 2, torch.log2(x1), 2*x1)

# Equaivalent code
y2 = x2.clone().detach()
for i in range(len(x2)):
    if x2[i] > 2:
        y2[i] = torch.log2(x2[i])
    else:
        y2[i] = 2*x2[i]

z1 = y1.sum()
z2 = y2.sum()

z1.backward()
x1.grad = torch.nan_to_num(x1.grad)  # log2(0) in the unused branch
z2.backward()

# Check the gradients
print('y1 =',y1)
print('x1.grad =', x1.grad)
print('y2 =',y2)
print('x2.grad = ', x2.grad)
