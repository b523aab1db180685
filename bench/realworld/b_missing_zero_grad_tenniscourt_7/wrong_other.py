"""train() in base_trainer never calls optimizer.zero_grad(): gradients of all previous batches add up and every step uses their sum

source: https://github.com/yastrebksv/TennisCourtDetector/issues/7
symptom: wrong-value
rule: none
shape: train(model, train_loader, optimizer, criterion, device, epoch) loop over batches of heatmaps
wrong: other
why: calls zero_grad between backward and step, so the step always sees zero gradients and the model never trains
"""
import torch
import torch.nn as nn


def train(model, train_loader, optimizer, criterion, device, epoch, max_iters=1000):
    model.train()
    losses = []
    for iter_id, batch in enumerate(train_loader):
        out = model(batch[0].float().to(device))
        gt_hm_hp = batch[1].float().to(device)
        loss = criterion(torch.sigmoid(out), gt_hm_hp)
        loss.backward()
        optimizer.zero_grad()
        optimizer.step()
        losses.append(loss.item())
        if iter_id > max_iters - 1:
            break
    return sum(losses) / len(losses)


torch.manual_seed(0)
device = torch.device("cpu")
model = nn.Conv2d(3, 2, 3, padding=1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
train_loader = [(torch.randn(2, 3, 6, 6), torch.rand(2, 2, 6, 6)) for _ in range(10)]
train_loss = train(model, train_loader, optimizer, nn.MSELoss(), device, epoch=0)
print("train loss:", round(train_loss, 4))
print("weight norm:", round(model.weight.norm().item(), 4))
