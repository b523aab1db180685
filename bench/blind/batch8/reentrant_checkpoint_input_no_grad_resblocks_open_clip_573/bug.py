"""The transformer runs its residual blocks through reentrant torch.utils.checkpoint, but the tokens come from a locked (frozen) embedding so the checkpoint input does not require grad; the reentrant checkpoint then returns outputs without a graph into the block, and the checkpointed blocks get no gradients.

source: https://github.com/mlfoundations/open_clip/issues/573
symptom: none-grad
rule: ?
shape: open_clip-style Transformer nn.Module (ModuleList of residual attention-free blocks, grad_checkpointing flag) on top of a locked embedding, projection head, AdamW training loop, several steps
"""
import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

torch.manual_seed(0)


class ResBlock(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.ln = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 2 * width), nn.GELU(), nn.Linear(2 * width, width))

    def forward(self, x):
        return x + self.mlp(self.ln(x))


class Transformer(nn.Module):
    def __init__(self, width=16, layers=3):
        super().__init__()
        self.grad_checkpointing = True
        self.resblocks = nn.ModuleList([ResBlock(width) for _ in range(layers)])

    def forward(self, x):
        for r in self.resblocks:
            if self.grad_checkpointing and not torch.jit.is_scripting():
                x = checkpoint(r, x, use_reentrant=True)  # bench: bug
            else:
                x = r(x)
        return x


class TextTower(nn.Module):
    def __init__(self, vocab=20, width=16, out_dim=8):
        super().__init__()
        self.token_embedding = nn.Embedding(vocab, width)
        self.transformer = Transformer(width)
        self.ln_final = nn.LayerNorm(width)
        self.proj = nn.Linear(width, out_dim, bias=False)

    def lock_embedding(self):
        for p in self.token_embedding.parameters():
            p.requires_grad = False

    def forward(self, text):
        x = self.token_embedding(text)
        x = self.transformer(x)
        return self.proj(self.ln_final(x).mean(dim=1))


model = TextTower()
model.lock_embedding()
optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
text = torch.randint(0, 20, (6, 5))
target = torch.randn(6, 8)

for step in range(4):
    optimizer.zero_grad()
    loss = ((model(text) - target) ** 2).mean()
    loss.backward()
    optimizer.step()

g = model.transformer.resblocks[0].mlp[0].weight.grad
print("loss", round(loss.item(), 4))
print("resblock0 grad norm", None if g is None else round(g.norm().item(), 4))
print("proj grad norm", round(model.proj.weight.grad.norm().item(), 4))
