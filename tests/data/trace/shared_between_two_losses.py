import torch

g = torch.nn.Linear(2, 3)
d = torch.nn.Linear(3, 1)
for step in range(2):
    fake = torch.tanh(g(torch.randn(4, 2)))
    d_loss = d(fake).sigmoid().mean()  # trains g too: the generator's graph is freed
    d_loss.backward()
    g_loss = -d(fake).sigmoid().mean()
    g_loss.backward()
