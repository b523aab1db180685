# The correct examples of seed 000 (正确例子), as one script.
import torch

# 赋值给其他变量名: bind the derived value to another name
eta2 = torch.nn.Parameter(torch.rand(10), requires_grad=True)
eta_temp = eta2 * 2
eta_temp.sum().backward()
print(eta2.grad)

# 用克隆的方法: clone a slice before changing it
v2 = torch.nn.Parameter(torch.rand(10), requires_grad=True)
b = v2[:4].clone()
b.data.copy_(torch.rand(4))

# 先全部初始化完成,再包装成Parameter: shape first, wrap last
k = torch.randn(12, 1)
k = k.view(3, 4)
kp = torch.nn.Parameter(k, requires_grad=True)
kp.sum().backward()

# 建立一个变量,然后把值填进去: fill a fresh buffer
a = torch.nn.Parameter(torch.rand(5), requires_grad=True)
A2 = torch.zeros([5])
A2[0] = a[0] * 2
A2[1] = torch.log(a[1] + 1)
A2[2] = a[2] ** 2
A2[3] = torch.nn.functional.softplus(a[3] * 2)
A2[4] = a[4]
A2.sum().backward()

# 用cat或stack拼起来
A3 = torch.stack((a[0] * 2, torch.log(a[1] + 1), a[2] ** 2, torch.nn.functional.softplus(a[3] * 2), a[4]))
a.grad.zero_()
A3.sum().backward()
print(a.grad)


class Example(torch.nn.Module):
    def __init__(self):
        super().__init__()
        # learnable R1n and R2n
        self.paramn_ = torch.nn.Parameter(torch.rand(2), requires_grad=True)
        self.eta_estimator = torch.nn.Sequential(torch.nn.Linear(3, 1))
        self.eta_estimator.train(False)
        self.param_max = torch.tensor([2, 4, 2])
        self.param_min = torch.tensor([1, 2, 0])

    @property
    def Param(self):
        paramn = torch.zeros([3])
        paramn[0] = self.paramn_[0]  # R1n
        paramn[1] = self.paramn_[1]  # R2n
        # denormalization
        param = paramn * (self.param_max - self.param_min) + self.param_min
        # calculate k=R1/R2
        param_temp = torch.stack([param[0], param[1], param[0] / param[1]])
        # normalization
        paramn = (param_temp - self.param_min) / (self.param_max - self.param_min)
        return paramn

    @property
    def eta(self):
        return self.eta_estimator(self.Param)


test = Example()
test.Param.sum().backward()
print(test.paramn_.grad, test.eta)
