"""The ACE loss takes torch.log of the softmax scores aggregated over time; a class whose score underflows to exactly 0 gives log(0) = -inf times a zero label, so the loss and every gradient become nan.

source: https://github.com/summerlvsong/Aggregation-Cross-Entropy/issues/2
symptom: nan-grad
rule: ?
shape: text-recognition nn.Module (conv feature map, per-position classifier, softmax) trained with a custom ACE loss nn.Module that aggregates probabilities over the 2-D positions
"""
import torch
import torch.nn as nn

torch.manual_seed(0)


class ACE(nn.Module):
    def __init__(self, dictionary):
        super().__init__()
        self.dict = dictionary

    def forward(self, input, label):
        self.bs, self.h, self.w, _ = input.size()
        T_ = self.h * self.w
        input = input.view(self.bs, T_, -1)
        input = input + 1e-10
        label = label.clone()
        label[:, 0] = T_ - label[:, 0]
        input = torch.sum(input, 1)
        input = input / T_
        label = label / T_
        loss = (-torch.sum(torch.log(input) * label)) / self.bs
        return loss


class Recognizer(nn.Module):
    def __init__(self, n_classes=5):
        super().__init__()
        self.features = nn.Conv2d(1, 8, 3, padding=1)
        self.classifier = nn.Linear(8, n_classes)
        with torch.no_grad():
            self.classifier.bias[3] = -23.0   # a character the model has not learned yet
            self.classifier.bias[4] = -200.0  # a character absent from the batch

    def forward(self, x):
        f = torch.relu(self.features(x)).permute(0, 2, 3, 1)
        return torch.softmax(self.classifier(f), dim=-1)


model = Recognizer()
criterion = ACE(dictionary="_abcd")
x = torch.randn(2, 1, 4, 4)
# label[:, k] = number of occurrences of character k (index 0 = blank, filled in by the loss)
label = torch.tensor([[0.0, 2.0, 1.0, 1.0, 0.0], [0.0, 1.0, 2.0, 1.0, 0.0]])
loss = criterion(model(x), label)
loss.backward()
print("loss", round(loss.item(), 4))
print("classifier_grad", round(model.classifier.weight.grad.norm().item(), 4))
print("bias3_grad", round(model.classifier.bias.grad[3].item(), 4))
