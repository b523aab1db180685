"""The LoRA trainer class calls optimizer.step() but never optimizer.zero_grad(), so every step applies the sum of all gradients seen so far.

source: https://github.com/tenstorrent/tt-blacksmith/pull/711
symptom: no-training
rule: ?
shape: trainer class for a LoRA model (frozen base linear layers with trainable low-rank adapters as a submodule), train_step method doing forward, backward, optimizer step
"""
import torch
import torch.nn as nn

torch.manual_seed(0)


class LoRALinear(nn.Module):
    def __init__(self, base, rank=2, alpha=4.0):
        super().__init__()
        self.base = base
        for p in self.base.parameters():
            p.requires_grad_(False)
        self.lora_A = nn.Parameter(torch.randn(rank, base.in_features) * 0.1)
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, rank))
        self.scaling = alpha / rank

    def forward(self, x):
        return self.base(x) + (x @ self.lora_A.t() @ self.lora_B.t()) * self.scaling


class TinyLM(nn.Module):
    def __init__(self, vocab=12, dim=8):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.emb.weight.requires_grad_(False)
        self.proj = LoRALinear(nn.Linear(dim, dim))
        self.head = LoRALinear(nn.Linear(dim, vocab))

    def forward(self, ids):
        return self.head(torch.tanh(self.proj(self.emb(ids))))


class Trainer:
    def __init__(self, model, lr=1e-2):
        self.model = model
        self.optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)

    def train_step(self, ids):
        logits = self.model(ids[:, :-1])
        loss = nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), ids[:, 1:].reshape(-1))
        loss.backward()
        self.optimizer.step()  # bench: bug
        return loss


trainer = Trainer(TinyLM())
ids = torch.randint(0, 12, (4, 7))
for step in range(5):
    loss = trainer.train_step(ids)

print("loss", round(loss.item(), 4))
gB = trainer.model.head.lora_B.grad
print("lora_B_grad", None if gB is None else round(gB.norm().item(), 4))
print("lora_B_norm", round(trainer.model.head.lora_B.norm().item(), 4))
