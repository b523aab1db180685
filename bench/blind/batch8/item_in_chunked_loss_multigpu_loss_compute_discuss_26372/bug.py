"""The chunked loss helper turns the summed chunk loss into a Python number with `.item()` before normalising it, so the chunk loss has no graph: `l.backward()` fails and the chunk columns never get a gradient to pass back into the model.

source: https://discuss.pytorch.org/t/grad-is-none-autograd-through-list-of-variables-multigpu-transformer/26372
symptom: error
rule: ?
shape: annotated-transformer style MultiGPULossCompute class (generator applied to detached output chunks, per-chunk loss backward, chunk grads concatenated and pushed into the model output with out.backward(grad)), Adam training loop, several steps
"""
import torch
import torch.nn as nn

torch.manual_seed(0)

V, D = 11, 16


class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(D, V)

    def forward(self, x):
        return torch.log_softmax(self.proj(x), dim=-1)


class LossCompute:
    """Single-device stand-in for MultiGPULossCompute (one 'device', no replicate/scatter/gather)."""

    def __init__(self, generator, criterion, opt=None, chunk_size=3):
        self.generator = generator
        self.criterion = criterion
        self.opt = opt
        self.chunk_size = chunk_size

    def __call__(self, out, targets, normalize):
        total = 0.0
        out_grad = []
        for i in range(0, out.size(1), self.chunk_size):
            out_column = out[:, i:i + self.chunk_size].detach().requires_grad_(self.opt is not None)
            gen = self.generator(out_column)
            loss = self.criterion(gen.contiguous().view(-1, gen.size(-1)),
                                  targets[:, i:i + self.chunk_size].contiguous().view(-1))
            l = loss.sum().item() / normalize.float()  # bench: bug
            total += l.item()
            if self.opt is not None:
                l.backward()
                out_grad.append(out_column.grad.data.clone())
        if self.opt is not None:
            out.backward(gradient=torch.cat(out_grad, dim=1))
            self.opt.step()
            self.opt.zero_grad()
        return total * normalize.float()


encoder = nn.Sequential(nn.Embedding(V, D), nn.Linear(D, D), nn.Tanh())
generator = Generator()
opt = torch.optim.Adam(list(encoder.parameters()) + list(generator.parameters()), lr=1e-2)
loss_compute = LossCompute(generator, nn.NLLLoss(reduction='sum'), opt=opt)

src = torch.randint(0, V, (4, 7))
tgt = (src + 1) % V
ntokens = torch.tensor(tgt.numel())

for step in range(4):
    out = encoder(src)
    total = loss_compute(out, tgt, ntokens)

with torch.no_grad():
    final = nn.NLLLoss()(generator(encoder(src)).view(-1, V), tgt.view(-1))
print("last total loss", round(float(total), 4))
print("final loss", round(final.item(), 4))
print("embedding weight norm", round(encoder[0].weight.norm().item(), 4))
