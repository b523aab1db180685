"""RMSE loss as torch.sqrt(nn.MSELoss()(...)): when the MSE is exactly 0 the backward returns nan

source: https://e-com-net.com/article/1610540118618177536.htm
symptom: nan-grad
rule: none
shape: module-level script: sqrt wrapped around a loss module (RMSE), with anomaly detection off
wrong: clamp-eps
why: adds the eps outside the square root, so sqrt(0) is still differentiated and the gradient is still nan
"""
import torch
import torch.nn as nn

torch.manual_seed(0)
x = torch.randn(1, 1, requires_grad=True)
y = torch.zeros(1, 1)
criterion = nn.MSELoss()

loss = torch.sqrt(criterion(x * 0, y)) + 1e-8
loss.backward()
print(x.grad)
