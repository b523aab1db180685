"""resnet_fpn_backbone always freezes conv1 and layer1 (hard-coded, meant for an ImageNet-pretrained backbone), even when the detector is trained from scratch with pretrained_backbone=False, so those randomly initialised layers never train.

source: https://github.com/pytorch/vision/pull/2160
symptom: no-training
rule: ?
shape: detection library helpers (ResNet-style backbone, backbone builder that freezes stages by parameter name, FPN, detector builder) and a reference-style training loop whose optimizer takes only parameters with requires_grad
"""
import torch
from torch import nn
import torch.nn.functional as F

torch.manual_seed(0)


class FrozenBatchNorm2d(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.register_buffer("weight", torch.ones(n))
        self.register_buffer("bias", torch.zeros(n))

    def forward(self, x):
        return x * self.weight[:, None, None] + self.bias[:, None, None]


class TinyResNet(nn.Module):
    def __init__(self, norm_layer=FrozenBatchNorm2d):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.bn1 = norm_layer(8)
        self.layer1 = nn.Conv2d(8, 8, 3, padding=1)
        self.layer2 = nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.layer3 = nn.Conv2d(16, 16, 3, stride=2, padding=1)
        self.layer4 = nn.Conv2d(16, 16, 3, stride=2, padding=1)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        c1 = F.relu(self.layer1(x))
        c2 = F.relu(self.layer2(c1))
        c3 = F.relu(self.layer3(c2))
        c4 = F.relu(self.layer4(c3))
        return [c1, c2, c3, c4]


class BackboneWithFPN(nn.Module):
    def __init__(self, body, in_channels_list=(8, 16, 16, 16), out_channels=8):
        super().__init__()
        self.body = body
        self.inner = nn.ModuleList(nn.Conv2d(c, out_channels, 1) for c in in_channels_list)

    def forward(self, x):
        feats = self.body(x)
        out = self.inner[-1](feats[-1])
        results = [out]
        for f, inner in zip(feats[-2::-1], list(self.inner)[-2::-1]):
            out = inner(f) + F.interpolate(out, size=f.shape[-2:], mode="nearest")
            results.insert(0, out)
        return results


def resnet_fpn_backbone(pretrained, trainable_layers=3):
    backbone = TinyResNet()
    # select layers that wont be frozen
    assert trainable_layers <= 5 and trainable_layers >= 0
    layers_to_train = ['layer4', 'layer3', 'layer2', 'layer1', 'conv1'][:trainable_layers]
    # freeze layers only if pretrained backbone is used
    for name, parameter in backbone.named_parameters():
        if all([not name.startswith(layer) for layer in layers_to_train]):
            parameter.requires_grad_(False)
    return BackboneWithFPN(backbone)


class Detector(nn.Module):
    def __init__(self, backbone, num_classes=3):
        super().__init__()
        self.backbone = backbone
        self.cls_head = nn.Conv2d(8, num_classes, 1)

    def forward(self, images):
        feats = self.backbone(images)
        return sum(self.cls_head(f).mean(dim=(2, 3)) for f in feats)


def fasterrcnn_resnet_fpn(pretrained=False, pretrained_backbone=False, trainable_backbone_layers=3):
    assert trainable_backbone_layers <= 5 and trainable_backbone_layers >= 0
    # dont freeze any layers if pretrained model or backbone is not used
    if not (pretrained or pretrained_backbone):
        trainable_backbone_layers = 5
    backbone = resnet_fpn_backbone(pretrained_backbone, trainable_backbone_layers)
    return Detector(backbone)


model = fasterrcnn_resnet_fpn(pretrained=False, pretrained_backbone=False)
params = [p for p in model.parameters() if p.requires_grad]
optimizer = torch.optim.SGD(params, lr=0.1, momentum=0.9)
images = torch.randn(4, 3, 32, 32)
labels = torch.tensor([0, 1, 2, 1])
conv1_w0 = model.backbone.body.conv1.weight.detach().clone()
layer1_w0 = model.backbone.body.layer1.weight.detach().clone()
for step in range(4):
    optimizer.zero_grad()
    loss = F.cross_entropy(model(images), labels)
    loss.backward()
    optimizer.step()
print("loss", round(loss.item(), 4))
print("conv1 change", round((model.backbone.body.conv1.weight - conv1_w0).norm().item(), 4))
print("layer1 change", round((model.backbone.body.layer1.weight - layer1_w0).norm().item(), 4))
