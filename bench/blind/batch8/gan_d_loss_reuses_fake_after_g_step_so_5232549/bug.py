"""The discriminator loss reuses the generator output `fake` without detaching it, after the generator step already backpropagated through (and freed) that graph.

source: https://whosebug.com/question/5232549/How-does-PyTorch-s-loss-backward-work-when-retain-graph-True-is-specified
symptom: error
rule: ?
shape: flat GAN training loop, generator step first then discriminator step on the same fake batch, two Adam optimizers, several steps
"""
import torch
import torch.nn as nn

torch.manual_seed(0)

G = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 8))
D = nn.Sequential(nn.Linear(8, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1))
optim_g = torch.optim.Adam(G.parameters(), lr=1e-3)
optim_d = torch.optim.Adam(D.parameters(), lr=1e-3)
bce = nn.BCEWithLogitsLoss()

for step in range(5):
    z = torch.randn(16, 4)
    real = torch.randn(16, 8) + 1.0
    fake = G(z)
    ones = torch.ones(16, 1)
    zeros = torch.zeros(16, 1)

    # computing loss_g and loss_d...
    loss_g = bce(D(fake), ones)
    loss_d = bce(D(real), ones) + bce(D(fake), zeros)  # bench: bug

    optim_g.zero_grad()
    loss_g.backward()
    optim_g.step()

    optim_d.zero_grad()
    loss_d.backward()
    optim_d.step()

print("loss_g", round(loss_g.item(), 4))
print("loss_d", round(loss_d.item(), 4))
print("G grad norm", round(G[0].weight.grad.norm().item(), 4))
print("D grad norm", round(D[0].weight.grad.norm().item(), 4))
