"""MergeLayer keeps its sub-layers in a plain Python list, so their weights are not registered: model.parameters() misses them and the optimizer never updates them.

source: https://github.com/asyml/texar-pytorch/issues/72
symptom: no-training
rule: ?
shape: library layer nn.Module (MergeLayer holding parallel sub-layers and merging their outputs) inside a classifier; ordinary optimizer loop
"""
import torch
import torch.nn as nn

torch.manual_seed(0)


class MergeLayer(nn.Module):
    def __init__(self, layers, mode="concat"):
        super().__init__()
        self._mode = mode
        self._layers = []  # bench: bug
        for layer in layers:
            self._layers.append(layer)  # bench: bug

    def forward(self, inputs):
        outputs = [layer(inputs) for layer in self._layers]
        if self._mode == "concat":
            return torch.cat(outputs, dim=-1)
        return torch.stack(outputs).sum(0)


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.merge = MergeLayer([nn.Linear(6, 4), nn.Sequential(nn.Linear(6, 4), nn.Tanh())])
        self.out = nn.Linear(8, 3)

    def forward(self, x):
        return self.out(torch.relu(self.merge(x)))


model = Classifier()
optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
x, y = torch.randn(16, 6), torch.randint(0, 3, (16,))
w0 = model.merge._layers[0].weight.detach().clone()
b0 = model.merge._layers[0].bias.detach().clone()
for step in range(5):
    optimizer.zero_grad()
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()

print("n_params", sum(p.numel() for p in model.parameters()))
print("loss", round(loss.item(), 4))
print("merge_weight_change", round((model.merge._layers[0].weight - w0).norm().item(), 4))
print("merge_bias_change", round((model.merge._layers[0].bias - b0).norm().item(), 4))
