"""The SFT recipe calls optimizers.zero_grad() only once before the training loop, so every step's gradients are added to all previous steps' gradients and each update uses the running sum.

source: https://github.com/meta-pytorch/torchforge/pull/71
symptom: no-training
rule: ?
shape: SFT recipe class (forward_backward / train_step / train), tiny causal language model, AdamW with a warmup LR scheduler over several steps
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class TinyLM(nn.Module):
    def __init__(self, vocab=20, dim=16):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.mix = nn.Linear(dim, dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, tokens):
        h = self.tok(tokens)
        h = h + torch.tanh(self.mix(torch.cumsum(h, 1) / torch.arange(1, h.shape[1] + 1).view(1, -1, 1)))
        return self.head(h)


class ForgeSFTRecipe:
    def __init__(self, num_training_steps):
        self.model = TinyLM()
        self.optimizers = torch.optim.AdamW(self.model.parameters(), lr=1e-2, weight_decay=0.0)
        self.lr_schedulers = torch.optim.lr_scheduler.LambdaLR(self.optimizers, lambda s: min(1.0, (s + 1) / 5))
        self.num_training_steps = num_training_steps
        self.current_step = 0
        g = torch.Generator().manual_seed(1)
        base = torch.randint(0, 20, (64, 1), generator=g)
        self.data = (base + torch.arange(9).view(1, -1) * 3) % 20

    def loss_fn(self, pred, labels):
        return F.cross_entropy(pred.reshape(-1, pred.shape[-1]), labels.reshape(-1))

    def forward_backward(self, inputs, labels, do_backward=True):
        pred = self.model(inputs)
        loss = self.loss_fn(pred, labels)
        del pred
        if do_backward:
            loss.backward()
        return loss

    def train_step(self, batch):
        labels = batch.pop("labels")
        loss = self.forward_backward(batch["tokens"], labels)
        self.optimizers.step()
        self.optimizers.zero_grad()
        self.lr_schedulers.step()
        return loss

    def train(self):
        self.optimizers.zero_grad()
        while self.current_step < self.num_training_steps:
            i = (self.current_step * 16) % 64
            seq = self.data[i:i + 16]
            batch = {"tokens": seq[:, :-1], "labels": seq[:, 1:]}
            self.last_loss = self.train_step(batch)
            self.current_step += 1


recipe = ForgeSFTRecipe(num_training_steps=30)
w0 = recipe.model.mix.weight.detach().clone()
recipe.train()
with torch.no_grad():
    eval_loss = recipe.forward_backward(recipe.data[:, :-1], recipe.data[:, 1:], do_backward=False)
print("loss", round(recipe.last_loss.item(), 4))
print("eval_loss", round(eval_loss.item(), 4))
print("mix_drift", round((recipe.model.mix.weight - w0).norm().item(), 4))
