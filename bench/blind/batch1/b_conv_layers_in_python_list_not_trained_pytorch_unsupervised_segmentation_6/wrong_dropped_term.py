"""The middle conv and batch-norm layers are kept in plain Python lists, so model.parameters() does not contain them and SGD never updates them.

source: https://github.com/kanezaki/pytorch-unsupervised-segmentation/pull/6
symptom: no-training
rule: ?
shape: nn.Module with a variable number of layers held in containers, unsupervised segmentation training loop (argmax pseudo-labels refined per superpixel, cross-entropy, SGD with momentum)
wrong: dropped-term
why: handing the listed conv weights to the optimizer by hand makes the convs train, but the batch-norm layers in the other list are still left out, so their affine parameters never move.
"""
import types

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim

torch.manual_seed(0)
np.random.seed(0)
args = types.SimpleNamespace(nChannel=12, maxIter=5, minLabels=3, lr=0.1, nConv=3)


# CNN model
class MyNet(nn.Module):
    def __init__(self, input_dim):
        super(MyNet, self).__init__()
        self.conv1 = nn.Conv2d(input_dim, args.nChannel, kernel_size=3, stride=1, padding=1)
        self.bn1 = nn.BatchNorm2d(args.nChannel)
        self.conv2 = []
        self.bn2 = []
        for i in range(args.nConv - 1):
            self.conv2.append(nn.Conv2d(args.nChannel, args.nChannel, kernel_size=3, stride=1, padding=1))
            self.bn2.append(nn.BatchNorm2d(args.nChannel))
        self.conv3 = nn.Conv2d(args.nChannel, args.nChannel, kernel_size=1, stride=1, padding=0)
        self.bn3 = nn.BatchNorm2d(args.nChannel)

    def forward(self, x):
        x = self.conv1(x)
        x = F.relu(x)
        x = self.bn1(x)
        for i in range(args.nConv - 1):
            x = self.conv2[i](x)
            x = F.relu(x)
            x = self.bn2[i](x)
        x = self.conv3(x)
        x = self.bn3(x)
        return x


# synthetic image and a grid of 4x4 "superpixels" in place of SLIC
H = W = 16
im = np.random.rand(H, W, 3).astype('float32')
data = torch.from_numpy(np.array([im.transpose((2, 0, 1))]))
labels = (np.arange(H)[:, None] // 4 * (W // 4) + np.arange(W)[None, :] // 4).reshape(H * W)
u_labels = np.unique(labels)
l_inds = [np.where(labels == u)[0] for u in u_labels]

# train
model = MyNet(data.size(1))
model.train()
loss_fn = torch.nn.CrossEntropyLoss()
optimizer = optim.SGD(list(model.parameters()) + [p for c in model.conv2 for p in c.parameters()], lr=args.lr, momentum=0.9)
for batch_idx in range(args.maxIter):
    optimizer.zero_grad()
    output = model(data)[0]
    output = output.permute(1, 2, 0).contiguous().view(-1, args.nChannel)
    ignore, target = torch.max(output, 1)
    im_target = target.data.cpu().numpy()
    nLabels = len(np.unique(im_target))
    # superpixel refinement
    for i in range(len(l_inds)):
        labels_per_sp = im_target[l_inds[i]]
        u_labels_per_sp = np.unique(labels_per_sp)
        hist = np.zeros(len(u_labels_per_sp))
        for j in range(len(hist)):
            hist[j] = len(np.where(labels_per_sp == u_labels_per_sp[j])[0])
        im_target[l_inds[i]] = u_labels_per_sp[np.argmax(hist)]
    target = torch.from_numpy(im_target)
    loss = loss_fn(output, target)
    loss.backward()
    optimizer.step()

print("loss", round(loss.item(), 4))
print("conv2[0] grad norm", round(model.conv2[0].weight.grad.norm().item(), 4))
print("conv2[0] weight norm", round(model.conv2[0].weight.norm().item(), 4))
print("bn2[1] weight norm", round(model.bn2[1].weight.norm().item(), 4))
