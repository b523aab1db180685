import torch


def main():
    w = torch.randn(3, requires_grad=True)
    w.zero_()  # GF201
