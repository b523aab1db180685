"""Slot Attention registers the learned slot initialisation mean and log-sigma with register_buffer, so they are not parameters and stay at their initial values throughout training.

source: https://github.com/imbue-ai/slot_attention/issues/8
symptom: no-training
rule: ?
shape: SlotAttention nn.Module (slot init mu/log_sigma, iterative attention with GRU update, MLP) inside an autoencoder-style reconstruction objective
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class SlotAttention(nn.Module):
    def __init__(self, in_features=8, num_iterations=2, num_slots=3, slot_size=8, mlp_hidden_size=16):
        super().__init__()
        self.num_iterations, self.num_slots, self.slot_size = num_iterations, num_slots, slot_size
        self.norm_inputs = nn.LayerNorm(in_features)
        self.norm_slots = nn.LayerNorm(slot_size)
        self.project_q = nn.Linear(slot_size, slot_size, bias=False)
        self.project_k = nn.Linear(in_features, slot_size, bias=False)
        self.project_v = nn.Linear(in_features, slot_size, bias=False)
        self.gru = nn.GRUCell(slot_size, slot_size)
        self.mlp = nn.Sequential(nn.Linear(slot_size, mlp_hidden_size), nn.ReLU(), nn.Linear(mlp_hidden_size, slot_size))
        self.register_buffer("slots_mu", nn.init.xavier_uniform_(torch.zeros((1, 1, slot_size))))  # bench: bug
        self.register_buffer("slots_log_sigma", nn.init.xavier_uniform_(torch.zeros((1, 1, slot_size))))  # bench: bug

    def forward(self, inputs, noise):
        b = inputs.shape[0]
        inputs = self.norm_inputs(inputs)
        k, v = self.project_k(inputs), self.project_v(inputs)
        slots = self.slots_mu + self.slots_log_sigma.exp() * noise
        for _ in range(self.num_iterations):
            prev = slots
            q = self.project_q(self.norm_slots(slots))
            attn = F.softmax(torch.einsum("bid,bjd->bij", k, q) / self.slot_size ** 0.5, dim=-1) + 1e-8
            attn = attn / attn.sum(dim=1, keepdim=True)
            updates = torch.einsum("bij,bid->bjd", attn, v)
            slots = self.gru(updates.reshape(-1, self.slot_size), prev.reshape(-1, self.slot_size)).view(b, self.num_slots, self.slot_size)
            slots = slots + self.mlp(slots)
        return slots


model = SlotAttention()
decoder = nn.Linear(8, 8)
opt = torch.optim.Adam(list(model.parameters()) + list(decoder.parameters()), lr=0.01)
mu0 = model.slots_mu.detach().clone()
for step in range(5):
    x = torch.randn(2, 10, 8)
    noise = torch.randn(2, 3, 8)
    opt.zero_grad()
    slots = model(x, noise)
    loss = (decoder(slots).mean(1, keepdim=True) - x.mean(1, keepdim=True)).pow(2).mean()
    loss.backward()
    opt.step()
print("loss", round(loss.item(), 4))
print("slots_mu change", round((model.slots_mu - mu0).norm().item(), 4))
