"""The network mixin's `set_trainable` only touches parameters that already require grad, so after `set_trainable(False)` a later `set_trainable(True)` cannot unfreeze anything and the encoder never trains again.

source: https://github.com/nttcslab/byol-a/issues/7 (fix commit 60cebdc)
symptom: no-training
rule: ?
shape: nn.Module audio encoder with a mixin method that toggles requires_grad, a classifier head, two-stage training loop (frozen encoder, then fine-tuning) with one Adam optimizer
"""

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(0)


class NetworkCommonMixIn:
    """Common mixin for network definition."""

    def set_trainable(self, trainable=False):
        for p in self.parameters():
            p.requires_grad = trainable


class AudioNTT2020Task6(nn.Module, NetworkCommonMixIn):
    def __init__(self, n_mels, d):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 8, 3, stride=1, padding=1),
            nn.BatchNorm2d(8),
            nn.ReLU(),
            nn.MaxPool2d(2, stride=2),
            nn.Conv2d(8, 8, 3, stride=1, padding=1),
            nn.BatchNorm2d(8),
            nn.ReLU(),
            nn.MaxPool2d(2, stride=2),
        )
        self.fc = nn.Sequential(nn.Linear(8 * (n_mels // (2**2)), d), nn.ReLU(), nn.Linear(d, d), nn.ReLU())
        self.d = d

    def forward(self, x):
        x = self.features(x)  # (batch, ch, mel, time)
        x = x.permute(0, 3, 2, 1)  # (batch, time, mel, ch)
        B, T, D, C = x.shape
        x = x.reshape((B, T, C * D))
        x = self.fc(x)
        (x1, _) = torch.max(x, dim=1)
        x2 = torch.mean(x, dim=1)
        return x1 + x2


encoder = AudioNTT2020Task6(n_mels=16, d=32)
head = nn.Linear(32, 4)
opt = torch.optim.Adam(list(encoder.parameters()) + list(head.parameters()), lr=1e-3)
spec = torch.randn(8, 1, 16, 24)
labels = torch.randint(0, 4, (8,))
conv_init = encoder.features[0].weight.detach().clone()

for stage, trainable in (("linear probe", False), ("fine-tune", True)):
    encoder.set_trainable(trainable)
    for step in range(3):
        opt.zero_grad()
        loss = F.cross_entropy(head(encoder(spec)), labels)
        loss.backward()
        opt.step()

print("loss", round(loss.item(), 4))
print("encoder conv moved", round((encoder.features[0].weight.detach() - conv_init).norm().item(), 4))
print("encoder conv grad", None if encoder.features[0].weight.grad is None else round(encoder.features[0].weight.grad.norm().item(), 4))
