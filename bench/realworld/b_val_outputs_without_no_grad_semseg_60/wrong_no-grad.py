"""Validation runs output = model(input) without torch.no_grad(): the collected outputs keep their graphs and memory runs out after validation

source: https://github.com/hszhao/semseg/issues/60
symptom: memory-growth
rule: none
shape: validate() function: model.eval(), loop over val_loader, outputs gathered and concatenated for the metric
wrong: no-grad
why: turns off requires_grad on the model's parameters instead of using no_grad, so validation holds no graph but the model stays frozen for all later training
"""
import torch
import torch.nn as nn


def validate(val_loader, model, criterion):
    model.eval()
    outputs, targets = [], []
    for i, (input, target) in enumerate(val_loader):
        model.requires_grad_(False)
        output = model(input)
        outputs.append(output)
        targets.append(target)
    output = torch.cat(outputs)
    target = torch.cat(targets)
    loss = criterion(output, target)
    return loss, output


torch.manual_seed(0)
model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 2, 1))
val_loader = [(torch.randn(2, 3, 8, 8), torch.randint(0, 2, (2, 8, 8))) for _ in range(5)]
loss, output = validate(val_loader, model, nn.CrossEntropyLoss())
print("val loss:", round(loss.item(), 4))
print("validation outputs hold graphs:", output.requires_grad)
