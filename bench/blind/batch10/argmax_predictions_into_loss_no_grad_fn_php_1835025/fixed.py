"""The training loop feeds the loss the argmax class predictions (softmax(...).argmax(...).type(float32)) instead of the logits, so the loss has no grad_fn and loss.backward() raises.

source: https://php.bkmy88.com/faq/1835025.html
symptom: error
rule: ?
shape: flat multi-class classification script, nn.Sequential model, CrossEntropyLoss, SGD full-batch training loop over epochs with an accuracy metric
"""
import torch
import torch.nn as nn

torch.manual_seed(0)

centers = torch.tensor([[2.0, 0.0], [-2.0, 1.0], [0.0, -2.0]])
y_train = torch.randint(0, 3, (120,)).type(torch.float32)
X_train = centers[y_train.long()] + torch.randn(120, 2)

model = nn.Sequential(nn.Linear(2, 16), nn.ReLU(), nn.Linear(16, 3))
loss_fn = nn.CrossEntropyLoss()
optimiser = torch.optim.SGD(model.parameters(), lr=0.1)


def accuracy(y_true, y_pred):
    return (y_true == y_pred).float().mean().item() * 100


w0 = model[0].weight.detach().clone()
Epochs = 40
for epoch in range(Epochs):
    model.train()

    train_logits = model(X_train)
    train_preds_probs = torch.softmax(train_logits, dim=1).argmax(dim=1).type(torch.float32)
    loss = loss_fn(train_logits, y_train.long())
    train_accu = accuracy(y_train, train_preds_probs)

    optimiser.zero_grad()
    loss.backward()
    optimiser.step()

print("loss", round(loss.item(), 4))
print("train_accu", round(train_accu, 4))
print("w_drift", round((model[0].weight - w0).norm().item(), 4))
