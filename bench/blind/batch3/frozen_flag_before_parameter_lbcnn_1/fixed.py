"""ConvLBP sets requires_grad = False on its weight and only then replaces the weight with a new nn.Parameter, which requires grad again, so the fixed random binary (LBP) filters are trained like an ordinary convolution.

source: https://github.com/eeric/pytorch-LBCNN/issues/1
symptom: silent
rule: ?
shape: local binary CNN nn.Module: ConvLBP (nn.Conv2d subclass with fixed sparse +-1 weights set in __init__) inside residual BlockLBP submodules, SGD training loop
"""
import torch
import torch.nn as nn

torch.manual_seed(0)


class ConvLBP(nn.Conv2d):
    def __init__(self, in_channels, out_channels, kernel_size=3, sparsity=0.5):
        super().__init__(in_channels, out_channels, kernel_size, padding=1, bias=False)
        matrix_proba = torch.full(self.weight.shape, 0.5)
        binary_weights = torch.bernoulli(matrix_proba) * 2 - 1
        mask_inactive = torch.rand(matrix_proba.shape) > sparsity
        binary_weights.masked_fill_(mask_inactive, 0)
        self.weight = nn.Parameter(binary_weights)
        self.weight.requires_grad = False


class BlockLBP(nn.Module):
    def __init__(self, numChannels, numWeights):
        super().__init__()
        self.batch_norm = nn.BatchNorm2d(numChannels)
        self.conv_lbp = ConvLBP(numChannels, numWeights, kernel_size=3)
        self.conv_1x1 = nn.Conv2d(numWeights, numChannels, kernel_size=1)

    def forward(self, x):
        res = x
        x = self.batch_norm(x)
        x = torch.relu(self.conv_lbp(x))
        x = self.conv_1x1(x)
        return x + res


class Lbcnn(nn.Module):
    def __init__(self, nInputPlane=1, numChannels=4, numWeights=6, depth=2):
        super().__init__()
        self.preprocess_block = nn.Sequential(nn.Conv2d(nInputPlane, numChannels, 3, padding=1), nn.BatchNorm2d(numChannels), nn.ReLU())
        self.chained_blocks = nn.Sequential(*[BlockLBP(numChannels, numWeights) for _ in range(depth)])
        self.fc = nn.Linear(numChannels * 6 * 6, 3)

    def forward(self, x):
        x = self.chained_blocks(self.preprocess_block(x))
        return self.fc(x.flatten(1))


model = Lbcnn()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
lbp0 = model.chained_blocks[0].conv_lbp.weight.detach().clone()
x, y = torch.randn(4, 1, 6, 6), torch.randint(0, 3, (4,))
for it in range(3):
    optimizer.zero_grad()
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()

pre = model.preprocess_block[0].weight.grad
print("loss", round(loss.item(), 4))
print("lbp_weight_change", round((model.chained_blocks[0].conv_lbp.weight - lbp0).norm().item(), 4))
print("preprocess_grad", None if pre is None else round(pre.norm().item(), 4))
