"""Per-layer weight matrices stored in a plain Python list of nn.Parameter: they are missing from model.parameters() and never update

source: https://runebook.dev/zh/docs/pytorch/generated/torch.nn.parameterlist/torch.nn.ParameterList
symptom: no-training
rule: none
shape: nn.Module (CustomModel) whose __init__ builds a list comprehension of nn.Parameter; Adam over model.parameters()
wrong: other
why: stacks the weights into one plain tensor with requires_grad, which is not registered on the module, so the optimizer never updates it
"""
import torch
import torch.nn as nn


class CustomModel(nn.Module):
    def __init__(self, num_layers, in_features, out_features):
        super().__init__()
        self.weights = torch.stack([
            torch.randn(in_features, out_features)
            for i in range(num_layers)
        ]).requires_grad_()
        self.bias = nn.Parameter(torch.zeros(out_features))

    def forward(self, x):
        return torch.matmul(x, self.weights[0]) + self.bias


torch.manual_seed(0)
model = CustomModel(num_layers=3, in_features=10, out_features=5)
optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
x = torch.randn(8, 10)
y = torch.randn(8, 5)
before = model.weights[0].detach().clone()
for _ in range(3):
    optimizer.zero_grad()
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    optimizer.step()
print("模型参数数量:", len(list(model.parameters())))
print("weights[0] changed:", not torch.equal(before, model.weights[0].detach()))
