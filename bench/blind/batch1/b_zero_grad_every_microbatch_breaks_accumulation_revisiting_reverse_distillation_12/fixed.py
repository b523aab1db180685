"""With gradient accumulation, both optimizers are zeroed before every backward, so each step only sees the last micro-batch's gradient instead of the accumulated sum.

source: https://github.com/tientrandinh/Revisiting-Reverse-Distillation/issues/12
symptom: silent
rule: ?
shape: training loop with two Adam optimizers (projection layers; bn + decoder) over multi-scale features of a frozen encoder, gradient accumulation every 2 batches
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
device = torch.device('cpu')


class ProjLayer(nn.Module):
    def __init__(self, in_c, out_c):
        super(ProjLayer, self).__init__()
        self.proj = nn.Sequential(nn.Conv2d(in_c, in_c // 2, kernel_size=3, stride=1, padding=1),
                                  nn.InstanceNorm2d(in_c // 2),
                                  torch.nn.LeakyReLU(),
                                  nn.Conv2d(in_c // 2, out_c, kernel_size=3, stride=1, padding=1),
                                  nn.InstanceNorm2d(out_c),
                                  torch.nn.LeakyReLU())

    def forward(self, x):
        return self.proj(x)


class MultiProjectionLayer(nn.Module):
    def __init__(self, base=4):
        super(MultiProjectionLayer, self).__init__()
        self.proj_a = ProjLayer(base * 4, base * 4)
        self.proj_b = ProjLayer(base * 8, base * 8)
        self.proj_c = ProjLayer(base * 16, base * 16)

    def forward(self, features, features_noise=False):
        if features_noise is not False:
            return ([self.proj_a(features_noise[0]), self.proj_b(features_noise[1]), self.proj_c(features_noise[2])],
                    [self.proj_a(features[0]), self.proj_b(features[1]), self.proj_c(features[2])])
        return [self.proj_a(features[0]), self.proj_b(features[1]), self.proj_c(features[2])]


def loss_fucntion(a, b):
    cos_loss = torch.nn.CosineSimilarity()
    loss = 0
    for item in range(len(a)):
        loss += torch.mean(1 - cos_loss(a[item].view(a[item].shape[0], -1), b[item].view(b[item].shape[0], -1)))
    return loss


class Revisit_RDLoss(nn.Module):
    """Stand-in for the paper's projection loss: noisy-vs-clean feature consistency (cosine) per level."""

    def forward(self, inputs_noise, feature_space_noise, feature_space):
        return loss_fucntion(feature_space, feature_space_noise) + 0.1 * loss_fucntion(inputs_noise, feature_space_noise)


class Encoder(nn.Module):
    def __init__(self, base=4):
        super().__init__()
        self.l1 = nn.Conv2d(3, base * 4, 3, 2, 1)
        self.l2 = nn.Conv2d(base * 4, base * 8, 3, 2, 1)
        self.l3 = nn.Conv2d(base * 8, base * 16, 3, 2, 1)

    def forward(self, x):
        a = F.relu(self.l1(x))
        b = F.relu(self.l2(a))
        c = F.relu(self.l3(b))
        return [a, b, c]


class BN(nn.Module):
    def __init__(self, base=4):
        super().__init__()
        self.fuse = nn.Conv2d(base * 28, base * 16, 1)

    def forward(self, feats):
        size = feats[2].shape[-1]
        x = torch.cat([F.adaptive_avg_pool2d(f, size) for f in feats], 1)
        return F.relu(self.fuse(x))


class Decoder(nn.Module):
    def __init__(self, base=4):
        super().__init__()
        self.d3 = nn.Conv2d(base * 16, base * 16, 3, 1, 1)
        self.d2 = nn.ConvTranspose2d(base * 16, base * 8, 2, 2)
        self.d1 = nn.ConvTranspose2d(base * 8, base * 4, 2, 2)

    def forward(self, x):
        c = self.d3(x)
        b = self.d2(F.relu(c))
        a = self.d1(F.relu(b))
        return [a, b, c]


encoder, bn, decoder = Encoder(), BN(), Decoder()
encoder.eval()
encoder.requires_grad_(False)
proj_layer = MultiProjectionLayer(base=4).to(device)
proj_loss = Revisit_RDLoss()
optimizer_proj = torch.optim.Adam(list(proj_layer.parameters()), lr=1e-3, betas=(0.5, 0.999))
optimizer_distill = torch.optim.Adam(list(decoder.parameters()) + list(bn.parameters()), lr=5e-3, betas=(0.5, 0.999))
weight_proj = 0.2
train_dataloader = []
for _ in range(6):
    img = torch.rand(2, 3, 16, 16)
    train_dataloader.append((img, img + 0.2 * torch.randn_like(img), None))

for epoch in range(1, 3):
    bn.train()
    proj_layer.train()
    decoder.train()
    accumulation_steps = 2
    for i, (img, img_noise, _) in enumerate(train_dataloader):
        inputs = encoder(img)
        inputs_noise = encoder(img_noise)
        (feature_space_noise, feature_space) = proj_layer(inputs, features_noise=inputs_noise)
        L_proj = proj_loss(inputs_noise, feature_space_noise, feature_space)
        outputs = decoder(bn(feature_space))
        L_distill = loss_fucntion(inputs, outputs)
        loss = L_distill + weight_proj * L_proj
        loss.backward()
        if (i + 1) % accumulation_steps == 0:
            dgrad = bn.fuse.weight.grad.norm()
            optimizer_proj.step()
            optimizer_distill.step()
            # Clear gradients
            optimizer_proj.zero_grad()
            optimizer_distill.zero_grad()

print("loss", round(loss.item(), 4))
print("bn grad norm at last step", round(dgrad.item(), 4))
print("decoder weight norm", round(decoder.d3.weight.norm().item(), 4))
