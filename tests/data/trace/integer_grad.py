import torch

ids = torch.tensor([1, 2, 3], requires_grad=True)  # GF105
