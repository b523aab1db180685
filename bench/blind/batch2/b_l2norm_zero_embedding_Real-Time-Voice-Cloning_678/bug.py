"""The speaker encoder L2-normalises `relu(linear(h))` by dividing by its norm; an utterance whose ReLU embedding is all zero gives 0/0, and the GE2E loss and every gradient become NaN.

source: https://github.com/CorentinJ/Real-Time-Voice-Cloning/pull/678
symptom: nan-grad
rule: ?
shape: LSTM speaker-encoder nn.Module (embedding normalisation in forward, GE2E similarity matrix and loss methods with centroid normalisation, gradient scaling and clipping), Adam training loop
"""

import numpy as np
import torch
from torch import nn
from torch.nn.utils import clip_grad_norm_

torch.manual_seed(0)

mel_n_channels = 8
model_hidden_size = 16
model_num_layers = 2
model_embedding_size = 6


class SpeakerEncoder(nn.Module):
    def __init__(self, device, loss_device):
        super().__init__()
        self.loss_device = loss_device
        self.lstm = nn.LSTM(
            input_size=mel_n_channels, hidden_size=model_hidden_size, num_layers=model_num_layers, batch_first=True
        ).to(device)
        self.linear = nn.Linear(in_features=model_hidden_size, out_features=model_embedding_size).to(device)
        self.relu = torch.nn.ReLU().to(device)
        self.similarity_weight = nn.Parameter(torch.tensor([10.0])).to(loss_device)
        self.similarity_bias = nn.Parameter(torch.tensor([-5.0])).to(loss_device)
        self.loss_fn = nn.CrossEntropyLoss().to(loss_device)

    def do_gradient_ops(self):
        self.similarity_weight.grad *= 0.01
        self.similarity_bias.grad *= 0.01
        clip_grad_norm_(self.parameters(), 3, norm_type=2)

    def forward(self, utterances, hidden_init=None):
        out, (hidden, cell) = self.lstm(utterances, hidden_init)
        embeds_raw = self.relu(self.linear(hidden[-1]))
        embeds = embeds_raw / torch.norm(embeds_raw, dim=1, keepdim=True)  # bench: bug
        return embeds

    def similarity_matrix(self, embeds):
        speakers_per_batch, utterances_per_speaker = embeds.shape[:2]
        centroids_incl = torch.mean(embeds, dim=1, keepdim=True)
        centroids_incl = centroids_incl.clone() / torch.norm(centroids_incl, dim=2, keepdim=True)  # bench: bug
        centroids_excl = torch.sum(embeds, dim=1, keepdim=True) - embeds
        centroids_excl /= utterances_per_speaker - 1
        centroids_excl = centroids_excl.clone() / torch.norm(centroids_excl, dim=2, keepdim=True)  # bench: bug
        sim_matrix = torch.zeros(speakers_per_batch, utterances_per_speaker, speakers_per_batch).to(self.loss_device)
        mask_matrix = 1 - np.eye(speakers_per_batch, dtype=int)
        for j in range(speakers_per_batch):
            mask = np.where(mask_matrix[j])[0]
            sim_matrix[mask, :, j] = (embeds[mask] * centroids_incl[j]).sum(dim=2)
            sim_matrix[j, :, j] = (embeds[j] * centroids_excl[j]).sum(dim=1)
        return sim_matrix * self.similarity_weight + self.similarity_bias

    def loss(self, embeds):
        speakers_per_batch, utterances_per_speaker = embeds.shape[:2]
        sim_matrix = self.similarity_matrix(embeds)
        sim_matrix = sim_matrix.reshape((speakers_per_batch * utterances_per_speaker, speakers_per_batch))
        ground_truth = np.repeat(np.arange(speakers_per_batch), utterances_per_speaker)
        target = torch.from_numpy(ground_truth).long().to(self.loss_device)
        return self.loss_fn(sim_matrix, target)


speakers_per_batch, utterances_per_speaker, n_frames = 3, 4, 10
frames = torch.randn(speakers_per_batch * utterances_per_speaker, n_frames, mel_n_channels)
model = SpeakerEncoder("cpu", "cpu")
with torch.no_grad():  # a later training state: larger weights, negative biases, some ReLU rows dead
    model.linear.weight.mul_(4)
    model.linear.bias.fill_(-0.1)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

for step in range(2):
    embeds = model(frames)
    embeds = embeds.view((speakers_per_batch, utterances_per_speaker, -1))
    loss = model.loss(embeds)
    model.zero_grad()
    loss.backward()
    model.do_gradient_ops()
    optimizer.step()

print("loss", round(loss.item(), 4))
print("linear grad norm", round(model.linear.weight.grad.norm().item(), 4))
print("lstm grad norm", round(model.lstm.weight_hh_l0.grad.norm().item(), 4))
