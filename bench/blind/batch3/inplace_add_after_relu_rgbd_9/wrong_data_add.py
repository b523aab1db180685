"""The RGB-D fusion block adds the depth feature into the ReLU output with `out += d`, an in-place add on a tensor ReLU's backward still needs.

source: https://github.com/charlesCXK/RGBD_Semantic_Segmentation_PyTorch/issues/9
symptom: error
rule: ?
shape: segmentation network nn.Module with a fusion block submodule (conv-bn-relu on RGB, separate depth branch, in-place sum), pixel-wise cross-entropy training step
wrong: detach
why: adding through out.data hides the add from autograd: the forward is the same but the depth branch receives no gradient, so depth_conv never learns.
"""
import torch
import torch.nn as nn

torch.manual_seed(0)


class FusionBlock(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=False)
        self.depth_conv = nn.Conv2d(1, cout, 3, padding=1)

    def forward(self, x, depth):
        out = self.relu(self.bn(self.conv(x)))
        d = self.depth_conv(depth)
        out.data += d.data
        return out


class Net(nn.Module):
    def __init__(self, n_classes=3):
        super().__init__()
        self.block1 = FusionBlock(3, 6)
        self.block2 = FusionBlock(6, 6)
        self.head = nn.Conv2d(6, n_classes, 1)

    def forward(self, rgb, depth):
        x = self.block1(rgb, depth)
        x = self.block2(x, depth)
        return self.head(x)


model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
criterion = nn.CrossEntropyLoss()
for it in range(2):
    rgb, depth = torch.randn(2, 3, 8, 8), torch.rand(2, 1, 8, 8)
    label = torch.randint(0, 3, (2, 8, 8))
    loss = criterion(model(rgb, depth), label)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()

g = torch.sqrt(sum((p.grad ** 2).sum() for p in model.parameters() if p.grad is not None))
print("loss", round(loss.item(), 4))
print("grad_norm", round(g.item(), 4))
dg = model.block1.depth_conv.weight.grad
print("depth_conv_grad", None if dg is None else round(dg.norm().item(), 4))
