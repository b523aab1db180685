import torch

# needs the measurements file of the lab: cannot run here
table = torch.load("measurements.pt")
gain = torch.zeros(3, requires_grad=True)
gain.uniform_()
(table @ gain).sum().backward()
