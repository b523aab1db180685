"""The GAN loop steps the discriminator's optimizer (an in-place update of D's weights) and then backpropagates the generator loss through the same D forward graph, whose saved weights have been overwritten.

source: https://github.com/MorvanZhou/PyTorch-Tutorial/pull/91 (fix for pytorch/pytorch#39141)
symptom: error
rule: ?
shape: module-level GAN script (Sequential generator and discriminator, two Adam optimizers), one D forward shared by D_loss and G_loss, training loop
wrong: other
why: one backward of D_loss + G_loss runs, but both networks then follow the summed gradient: the fake term of D_loss cancels G_loss for the generator (G gets zero gradient) and D is pushed by the generator loss too.
"""

import numpy as np
import torch
import torch.nn as nn

torch.manual_seed(0)
np.random.seed(0)

BATCH_SIZE = 64
LR_G = 0.0001
LR_D = 0.0001
N_IDEAS = 5
ART_COMPONENTS = 15
PAINT_POINTS = np.vstack([np.linspace(-1, 1, ART_COMPONENTS) for _ in range(BATCH_SIZE)])


def artist_works():
    a = np.random.uniform(1, 2, size=BATCH_SIZE)[:, np.newaxis]
    paintings = a * np.power(PAINT_POINTS, 2) + (a - 1)
    return torch.from_numpy(paintings).float()


G = nn.Sequential(nn.Linear(N_IDEAS, 128), nn.ReLU(), nn.Linear(128, ART_COMPONENTS))
D = nn.Sequential(nn.Linear(ART_COMPONENTS, 128), nn.ReLU(), nn.Linear(128, 1), nn.Sigmoid())

opt_D = torch.optim.Adam(D.parameters(), lr=LR_D)
opt_G = torch.optim.Adam(G.parameters(), lr=LR_G)

for step in range(3):
    artist_paintings = artist_works()
    G_ideas = torch.randn(BATCH_SIZE, N_IDEAS)
    G_paintings = G(G_ideas)

    prob_artist0 = D(artist_paintings)
    prob_artist1 = D(G_paintings)

    D_loss = -torch.mean(torch.log(prob_artist0) + torch.log(1.0 - prob_artist1))
    G_loss = torch.mean(torch.log(1.0 - prob_artist1))

    opt_D.zero_grad()
    opt_G.zero_grad()
    (D_loss + G_loss).backward()
    opt_D.step()
    opt_G.step()

print("D_loss", round(D_loss.item(), 4))
print("G_loss", round(G_loss.item(), 4))
print("G grad norm", round(G[0].weight.grad.norm().item(), 4))
print("D grad norm", round(D[0].weight.grad.norm().item(), 4))
