"""The speaker encoder wraps its similarity weight and bias in nn.Parameter and then moves them to the loss device, which returns plain non-leaf copies: they are not registered and their .grad stays None.

source: https://github.com/CorentinJ/Real-Time-Voice-Cloning/issues/237
symptom: none-grad
rule: ?
shape: speaker-encoder nn.Module (LSTM, linear, ReLU) with learnable similarity scale/bias and a GE2E softmax loss computed on a separate loss device
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
loss_device = torch.float64  # stand-in for the CUDA loss device: .to() returns a new tensor


class SpeakerEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(8, 16, batch_first=True)
        self.linear = nn.Linear(16, 8)
        self.similarity_weight = nn.Parameter(torch.tensor([10.0])).to(loss_device)  # bench: bug
        self.similarity_bias = nn.Parameter(torch.tensor([-5.0])).to(loss_device)  # bench: bug

    def forward(self, utterances):
        _, (h, _) = self.lstm(utterances)
        e = F.relu(self.linear(h[-1]))
        return e / (e.norm(dim=1, keepdim=True) + 1e-5)

    def loss(self, embeds):
        spk, utt = embeds.shape[:2]
        centroids = embeds.mean(1)
        centroids = centroids / (centroids.norm(dim=1, keepdim=True) + 1e-5)
        sim = torch.einsum("sud,cd->suc", embeds, centroids)
        sim = sim * self.similarity_weight + self.similarity_bias
        labels = torch.arange(spk).repeat_interleave(utt)
        return F.cross_entropy(sim.reshape(spk * utt, spk), labels)


model = SpeakerEncoder()
x = torch.randn(3 * 4, 5, 8)
embeds = model(x).view(3, 4, -1).to(loss_device)
loss = model.loss(embeds)
loss.backward()
g = model.similarity_weight.grad
print("loss", round(loss.item(), 4))
print("n_params", len(list(model.parameters())))
print("similarity weight grad", None if g is None else round(g.item(), 4))
print("lstm grad", round(model.lstm.weight_ih_l0.grad.norm().item(), 4))
