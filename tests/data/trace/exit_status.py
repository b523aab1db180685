import sys

import torch

w = torch.randn(3, requires_grad=True)
(w * 2).sum().backward()
print("program output", w.grad.shape[0])
print("program error output", file=sys.stderr)
sys.exit(3)
