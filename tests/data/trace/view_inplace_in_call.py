import torch

SPLITS = {"halves": lambda t: t.chunk(2)}  # called through a table: no analysis follows it
w = torch.randn(4, requires_grad=True)
low, high = SPLITS["halves"](w * 3)
total = torch.sigmoid(high.clamp_(-1, 1)).sum() + low.sum()
total.backward()
print(round(total.item(), 4))
