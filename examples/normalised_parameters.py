"""Seed 000: a derived entry written into the tensor it is derived from (GF202)."""
import torch


class Example(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.paramn_ = torch.nn.Parameter(torch.rand(2))  # learnable R1n and R2n
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
        param[2] = param[0] / param[1]
        # normalization
        paramn = (param - self.param_min) / (self.param_max - self.param_min)
        return paramn


if __name__ == "__main__":
    test = Example()
    test.Param.sum().backward()  # RuntimeError: ... modified by an inplace operation
    print(test.paramn_.grad)
