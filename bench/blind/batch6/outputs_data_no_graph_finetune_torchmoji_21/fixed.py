"""The model returns outputs.data when asked for tensors, so the fine-tuning loss has no graph and backward fails; users then force requires_grad on the loss.

source: https://github.com/huggingface/torchMoji/issues/21
symptom: error
rule: ?
shape: text classifier nn.Module (embedding, LSTM, attention pooling, output layer) with a return_tensor flag, fine-tuning loop over the last layer
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class TorchMoji(nn.Module):
    def __init__(self, nb_tokens=50, nb_classes=2, return_tensor=True):
        super().__init__()
        self.embed = nn.Embedding(nb_tokens, 16)
        self.lstm = nn.LSTM(16, 16, batch_first=True)
        self.attention = nn.Linear(16, 1)
        self.output_layer = nn.Linear(16, nb_classes)
        self.return_tensor = return_tensor

    def forward(self, input_seqs):
        h, _ = self.lstm(torch.tanh(self.embed(input_seqs)))
        w = self.attention(h).softmax(dim=1)
        outputs = self.output_layer((w * h).sum(1))
        return outputs


model = TorchMoji()
opt = torch.optim.Adam(model.output_layer.parameters(), lr=0.05)
x = torch.randint(0, 50, (16, 7))
y = torch.randint(0, 2, (16,))
w0 = model.output_layer.weight.detach().clone()
for step in range(5):
    opt.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
print("loss", round(loss.item(), 4))
print("output layer change", round((model.output_layer.weight - w0).norm().item(), 4))
