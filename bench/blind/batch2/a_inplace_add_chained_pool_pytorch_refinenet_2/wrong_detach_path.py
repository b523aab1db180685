"""The chained residual pooling adds each pooled path back with `x += path`, overwriting the ReLU output that the max-pool and ReLU saved for backward.

source: https://github.com/thomasjpfan/pytorch_refinenet/issues/2 (fix commit e79e275)
symptom: error
rule: ?
shape: segmentation net of nn.Module blocks (residual conv units, chained residual pooling) spread over several classes, MSE loss, SGD training loop
wrong: detach
why: starting the pooling chain from a detached copy stops the gradient of the pooled paths from reaching the layers before the block.
"""

import torch
import torch.nn as nn

torch.manual_seed(0)


class ResidualConvUnit(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.conv1 = nn.Conv2d(features, features, kernel_size=3, stride=1, padding=1, bias=True)
        self.conv2 = nn.Conv2d(features, features, kernel_size=3, stride=1, padding=1, bias=False)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        out = self.relu(x)
        out = self.conv1(out)
        out = self.relu(out)
        out = self.conv2(out)
        return out + x


class ChainedResidualPool(nn.Module):
    def __init__(self, feats):
        super().__init__()
        self.relu = nn.ReLU(inplace=True)
        for i in range(1, 4):
            self.add_module(
                f"block{i}",
                nn.Sequential(
                    nn.MaxPool2d(kernel_size=5, stride=1, padding=2),
                    nn.Conv2d(feats, feats, kernel_size=3, stride=1, padding=1, bias=False),
                ),
            )

    def forward(self, x):
        x = self.relu(x)
        path = x.detach().clone()
        for i in range(1, 4):
            path = self.__getattr__(f"block{i}")(path)
            x = x + path
        return x


class RefineNetBlock(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.rcu0 = nn.Sequential(ResidualConvUnit(features), ResidualConvUnit(features))
        self.crp = ChainedResidualPool(features)
        self.output_conv = ResidualConvUnit(features)

    def forward(self, x):
        out = self.rcu0(x)
        out = self.crp(out)
        return self.output_conv(out)


class RefineNet(nn.Module):
    def __init__(self, features=8, num_classes=2):
        super().__init__()
        self.layer1 = nn.Sequential(nn.Conv2d(3, features, 3, stride=2, padding=1), nn.BatchNorm2d(features))
        self.refinenet = RefineNetBlock(features)
        self.output_conv = nn.Conv2d(features, num_classes, kernel_size=1)

    def forward(self, x):
        return self.output_conv(self.refinenet(self.layer1(x)))


net = RefineNet()
opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
criterion = nn.MSELoss()
x = torch.randn(4, 3, 16, 16)
target = torch.randn(4, 2, 8, 8)

for step in range(2):
    opt.zero_grad()
    loss = criterion(net(x), target)
    loss.backward()
    opt.step()


def grad_norm(p):
    return None if p.grad is None else round(p.grad.norm().item(), 4)


print("loss", round(loss.item(), 4))
print("crp block1 grad norm", grad_norm(net.refinenet.crp.block1[1].weight))
print("layer1 grad norm", grad_norm(net.layer1[0].weight))
