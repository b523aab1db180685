"""The contrastive loss takes `distances.sqrt()` of squared embedding distances; a pair of identical samples has distance exactly 0, the masked negative-pair term still differentiates sqrt at 0, and the gradient turns NaN.

source: https://github.com/adambielski/siamese-triplet/issues/18 (fix commit 69c1073)
symptom: nan-grad
rule: ?
shape: siamese network (embedding nn.Module shared by a SiameseNet wrapper), contrastive loss nn.Module, Adam training loop over pair batches
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class ContrastiveLoss(nn.Module):
    """
    Contrastive loss
    Takes embeddings of two samples and a target label == 1 if samples are from the same class and label == 0 otherwise
    """

    def __init__(self, margin):
        super(ContrastiveLoss, self).__init__()
        self.margin = margin

    def forward(self, output1, output2, target, size_average=True):
        distances = (output2 - output1).pow(2).sum(1)  # squared distances
        losses = 0.5 * (
            target.float() * distances
            + (1 + -1 * target).float() * F.relu(self.margin - distances.sqrt()).pow(2)  # bench: bug
        )
        return losses.mean() if size_average else losses.sum()


class EmbeddingNet(nn.Module):
    def __init__(self):
        super(EmbeddingNet, self).__init__()
        self.convnet = nn.Sequential(nn.Conv2d(1, 8, 3), nn.PReLU(), nn.MaxPool2d(2, stride=2))
        self.fc = nn.Sequential(nn.Linear(8 * 5 * 5, 32), nn.PReLU(), nn.Linear(32, 2))

    def forward(self, x):
        output = self.convnet(x)
        output = output.view(output.size()[0], -1)
        return self.fc(output)


class SiameseNet(nn.Module):
    def __init__(self, embedding_net):
        super(SiameseNet, self).__init__()
        self.embedding_net = embedding_net

    def forward(self, x1, x2):
        return self.embedding_net(x1), self.embedding_net(x2)


model = SiameseNet(EmbeddingNet())
loss_fn = ContrastiveLoss(margin=1.0)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

images = torch.randn(6, 1, 12, 12)
x1 = images
x2 = torch.cat([images[:1], images[2:], images[1:2]])  # pair 0 shows the same image twice
target = torch.tensor([1, 0, 1, 0, 0, 1])

for step in range(3):
    optimizer.zero_grad()
    out1, out2 = model(x1, x2)
    loss = loss_fn(out1, out2, target)
    loss.backward()
    optimizer.step()

print("loss", round(loss.item(), 4))
print("fc grad norm", round(model.embedding_net.fc[2].weight.grad.norm().item(), 4))
print("conv grad norm", round(model.embedding_net.convnet[0].weight.grad.norm().item(), 4))
