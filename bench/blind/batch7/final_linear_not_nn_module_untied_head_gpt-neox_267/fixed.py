"""With weight tying off, the model's final linear layer is a plain Python class holding its own Parameter instead of an nn.Module, so its weight is never registered, never reaches the optimizer and stays at its initial value.

source: https://github.com/EleutherAI/gpt-neox/pull/267
symptom: no-training
rule: ?
shape: small GPT-style LM (nn.Module with Embedding, a Transformer block and an untied output projection), Adam training loop
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)

class FinalLinear(nn.Module):
    def __init__(self, hidden, vocab):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(vocab, hidden) * 0.02)

    def forward(self, x):
        return F.linear(x, self.weight)


class GPT(nn.Module):
    def __init__(self, vocab, hidden, weight_tying=False):
        super().__init__()
        self.weight_tying = weight_tying
        self.embed = nn.Embedding(vocab, hidden)
        self.block = nn.TransformerEncoderLayer(hidden, 2, 2 * hidden, dropout=0.0, batch_first=True)
        self.final_linear = FinalLinear(hidden, vocab)

    def forward(self, tokens):
        h = self.block(self.embed(tokens), src_mask=nn.Transformer.generate_square_subsequent_mask(tokens.shape[1]))
        if self.weight_tying:
            return F.linear(h, self.embed.weight)
        return self.final_linear(h)


vocab, hidden = 20, 16
model = GPT(vocab, hidden, weight_tying=False)
w0 = model.final_linear.weight.detach().clone()
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
tokens = torch.randint(0, vocab, (4, 9))
for step in range(10):
    opt.zero_grad()
    logits = model(tokens[:, :-1])
    loss = F.cross_entropy(logits.reshape(-1, vocab), tokens[:, 1:].reshape(-1))
    loss.backward()
    opt.step()
print("loss", round(loss.item(), 4))
print("n params", sum(p.numel() for p in model.parameters()))
print("final linear change", round((model.final_linear.weight.detach() - w0).norm().item(), 4))
