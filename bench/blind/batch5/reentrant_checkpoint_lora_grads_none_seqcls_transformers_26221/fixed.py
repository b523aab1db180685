"""Fine-tuning LoRA adapters with gradient checkpointing in the default reentrant mode: the frozen embedding output does not require grad, so the checkpointed blocks are cut from the graph; the trainable classifier head still trains, but every LoRA adapter inside the blocks keeps .grad None.

source: https://github.com/huggingface/transformers/issues/26221
symptom: none-grad
rule: ?
shape: sequence-classification transformer with frozen base weights, LoRA adapters inside checkpointed encoder blocks, trainable classification head, trainer-style gradient_checkpointing_enable(kwargs), one optimizer step
"""
import warnings
import torch
from torch import nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

warnings.filterwarnings("ignore")
torch.manual_seed(0)
VOCAB, DIM = 40, 16


class LoRALinear(nn.Module):
    def __init__(self, base, r=4):
        super().__init__()
        self.base = base
        self.lora_A = nn.Parameter(torch.randn(r, base.in_features) * 0.1)
        self.lora_B = nn.Parameter(torch.full((base.out_features, r), 0.01))

    def forward(self, x):
        return self.base(x) + x @ self.lora_A.T @ self.lora_B.T


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn_proj = nn.Linear(DIM, DIM)
        self.ffn = nn.Linear(DIM, DIM)

    def forward(self, h):
        h = h + torch.tanh(self.attn_proj(h)).mean(1, keepdim=True)
        return h + F.gelu(self.ffn(h))


class TinySeqClassifier(nn.Module):
    def __init__(self, n_layers=2, n_labels=3):
        super().__init__()
        self.embeddings = nn.Embedding(VOCAB, DIM)
        self.layers = nn.ModuleList(Block() for _ in range(n_layers))
        self.classifier = nn.Linear(DIM, n_labels)
        self.gradient_checkpointing = False
        self.gc_kwargs = {}

    def gradient_checkpointing_enable(self, gradient_checkpointing_kwargs=None):
        self.gradient_checkpointing = True
        self.gc_kwargs = gradient_checkpointing_kwargs or {"use_reentrant": True}

    def forward(self, input_ids):
        h = self.embeddings(input_ids)
        for layer in self.layers:
            if self.gradient_checkpointing and self.training:
                h = checkpoint(layer, h, **self.gc_kwargs)
            else:
                h = layer(h)
        return self.classifier(h[:, 0])


model = TinySeqClassifier()
for p in model.parameters():
    p.requires_grad_(False)
for layer in model.layers:
    layer.attn_proj = LoRALinear(layer.attn_proj)
model.classifier.requires_grad_(True)
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
model.train()
opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
ids = torch.randint(0, VOCAB, (4, 7))
labels = torch.tensor([0, 1, 2, 1])
opt.zero_grad()
loss = F.cross_entropy(model(ids), labels)
loss.backward()
opt.step()


def gnorm(p):
    return None if p.grad is None else round(p.grad.norm().item(), 4)


print("loss", round(loss.item(), 4))
print("grad classifier", gnorm(model.classifier.weight))
print("grad lora_A layer0", gnorm(model.layers[0].attn_proj.lora_A))
print("grad lora_B layer1", gnorm(model.layers[1].attn_proj.lora_B))
