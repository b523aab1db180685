"""The backbone builder freezes every parameter whose name does not start with one of the trainable layer names; with trainable_layers=5 the list has conv1 but not bn1, so the stem BatchNorm stays frozen when the whole backbone should train.

source: https://github.com/pytorch/vision/issues/3394
symptom: no-training
rule: ?
shape: detection-style backbone builder (ResNet-like nn.Module, requires_grad_ freezing by layer-name prefixes), optimizer over trainable params, SGD loop over several steps
wrong: other
why: re-enabling requires_grad on bn1 after the trainable-parameter list was built gives bn1 gradients, but it is not in the optimizer, so it still never changes.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


def block(cin, cout, stride):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU())


class TinyResNet(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.layer1 = block(8, 8, 1)
        self.layer2 = block(8, 16, 2)
        self.layer3 = block(16, 16, 2)
        self.layer4 = block(16, 32, 2)
        self.fc = nn.Linear(32, num_classes)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return x


def resnet_backbone(trainable_layers=3):
    backbone = TinyResNet()
    # select layers that won't be frozen
    assert 0 <= trainable_layers <= 5
    layers_to_train = ["layer4", "layer3", "layer2", "layer1", "conv1"][:trainable_layers]
    for name, parameter in backbone.named_parameters():
        if all([not name.startswith(layer) for layer in layers_to_train]):
            parameter.requires_grad_(False)
    return backbone


backbone = resnet_backbone(trainable_layers=5)  # from scratch: every layer should train
head = nn.Conv2d(32, 4, 1)
params = [p for p in list(backbone.parameters()) + list(head.parameters()) if p.requires_grad]
backbone.bn1.requires_grad_(True)  # unfreeze the stem BN as well
opt = torch.optim.SGD(params, lr=0.1, momentum=0.9)
x = torch.randn(8, 3, 16, 16)
target = torch.randn(8, 4, 2, 2)
bn1_w0 = backbone.bn1.weight.detach().clone()
for step in range(10):
    opt.zero_grad()
    loss = F.mse_loss(head(backbone(x)), target)
    loss.backward()
    opt.step()
print("loss", round(loss.item(), 4))
print("bn1_drift", round((backbone.bn1.weight - bn1_w0).norm().item(), 4))
print("n_trainable", sum(p.numel() for p in params))
