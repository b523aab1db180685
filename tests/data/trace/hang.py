import time

import torch

x = torch.randn(3, requires_grad=True)
try:
    x.mul_(2)  # GF201, caught: the program goes on and hangs
except RuntimeError:
    pass
print("waiting", flush=True)
while True:
    time.sleep(0.1)
