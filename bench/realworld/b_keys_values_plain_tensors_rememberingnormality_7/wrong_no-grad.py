"""Memory module keys/values created as torch.randn(L, channel).to(device) instead of nn.Parameter: they stay at their random init

source: https://github.com/SimonThomine/RememberingNormality/issues/7
symptom: no-training
rule: none
shape: nn.Module memory/attention block inside a student network; optimizer over model.parameters()
wrong: no-grad
why: registers keys and values as buffers, so they move with the module but do not require grad and are never trained
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

device = torch.device("cpu")


class NormalityMemory(nn.Module):
    def __init__(self, L, channel):
        super().__init__()
        self.register_buffer("keys", torch.randn(L,channel).to(device))
        self.register_buffer("values", torch.randn(L,channel).to(device))

    def forward(self, x):
        attn = F.softmax(x @ self.keys.t(), dim=-1)
        return attn @ self.values


torch.manual_seed(0)
model = nn.Sequential(nn.Linear(6, 4), NormalityMemory(L=3, channel=4)).to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
x = torch.randn(5, 6)
target = torch.randn(5, 4)
before = model[1].keys.clone()
for _ in range(3):
    optimizer.zero_grad()
    F.mse_loss(model(x), target).backward()
    optimizer.step()
print("parameters:", len(list(model.parameters())))
print("keys changed:", not torch.equal(before, model[1].keys.detach()))
