"""DCGAN loop trains D on `netD(fake)` without detach, then backpropagates errG through the freed G graph

source: https://github.com/pytorch/examples/issues/116
symptom: error
rule: GF401
shape: GAN training loop: D step (real + fake) then G step reusing the same `fake` batch
wrong: detach
why: detaches the generator output where it is created, so the generator step gets no gradient and the generator never trains
"""
import torch
import torch.nn as nn
import torch.optim as optim

torch.manual_seed(0)
nz, nx, batch_size = 4, 6, 8
device = torch.device("cpu")
netG = nn.Sequential(nn.Linear(nz, 16), nn.ReLU(True), nn.Linear(16, nx), nn.Tanh())
netD = nn.Sequential(nn.Linear(nx, 16), nn.LeakyReLU(0.2, inplace=True), nn.Linear(16, 1), nn.Sigmoid())
criterion = nn.BCELoss()
real_label = 1.
fake_label = 0.
optimizerD = optim.Adam(netD.parameters(), lr=0.0002, betas=(0.5, 0.999))
optimizerG = optim.Adam(netG.parameters(), lr=0.0002, betas=(0.5, 0.999))
dataloader = [torch.randn(batch_size, nx) for _ in range(3)]

for i, data in enumerate(dataloader, 0):
    ############################
    # (1) Update D network: maximize log(D(x)) + log(1 - D(G(z)))
    ###########################
    # train with real
    netD.zero_grad()
    real_cpu = data.to(device)
    batch_size = real_cpu.size(0)
    label = torch.full((batch_size,), real_label, device=device)

    output = netD(real_cpu).view(-1)
    errD_real = criterion(output, label)
    errD_real.backward()

    # train with fake
    noise = torch.randn(batch_size, nz, device=device)
    fake = netG(noise).detach()
    label.fill_(fake_label)
    output = netD(fake).view(-1)
    errD_fake = criterion(output, label)
    errD_fake.backward()
    errD = errD_real + errD_fake
    optimizerD.step()

    ############################
    # (2) Update G network: maximize log(D(G(z)))
    ###########################
    netG.zero_grad()
    label.fill_(real_label)  # fake labels are real for generator cost
    output = netD(fake).view(-1)
    errG = criterion(output, label)
    errG.backward()
    optimizerG.step()

print(round(errD.item(), 4), round(errG.item(), 4))
