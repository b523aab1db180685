"""The modified decomposable-attention model takes -torch.log of softmax probabilities; with large-magnitude logits the softmax of the gold label underflows to exactly 0, so the loss is inf and the gradients nan.

source: https://github.com/allenai/allennlp/issues/2797
symptom: nan-grad
rule: ?
shape: NLI model nn.Module (frozen pre-trained embeddings, attend/compare/aggregate feed-forward submodules, label logits) whose forward computes its own cross-entropy from softmax probabilities
"""
import torch
import torch.nn as nn

torch.manual_seed(0)


class DecomposableAttention(nn.Module):
    def __init__(self, vocab=20, dim=6, n_labels=3):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.embed.weight.data.mul_(100.0)  # un-normalised pre-trained vectors
        self.embed.weight.requires_grad_(False)
        self.attend = nn.Sequential(nn.Linear(dim, dim), nn.ReLU())
        self.compare = nn.Sequential(nn.Linear(2 * dim, dim), nn.ReLU())
        self.aggregate = nn.Linear(2 * dim, n_labels)

    def forward(self, premise, hypothesis, labels):
        p, h = self.embed(premise), self.embed(hypothesis)
        sim = self.attend(p) @ self.attend(h).transpose(1, 2)
        p_att = torch.softmax(sim, -1) @ h
        h_att = torch.softmax(sim.transpose(1, 2), -1) @ p
        v1 = self.compare(torch.cat([p, p_att], -1)).sum(1)
        v2 = self.compare(torch.cat([h, h_att], -1)).sum(1)
        label_logits = self.aggregate(torch.cat([v1, v2], -1))
        log_label_probs = -torch.nn.functional.log_softmax(label_logits, dim=-1)
        loss = torch.sum(log_label_probs * labels.float())
        return label_logits, loss


model = DecomposableAttention()
premise = torch.randint(0, 20, (4, 5))
hypothesis = torch.randint(0, 20, (4, 4))
labels = torch.nn.functional.one_hot(torch.tensor([0, 1, 2, 1]), 3)
label_logits, loss = model(premise, hypothesis, labels)
loss.backward()
print("logit_range", round((label_logits.max() - label_logits.min()).item(), 4))
print("loss", round(loss.item(), 4))
print("aggregate_grad", round(model.aggregate.weight.grad.norm().item(), 4))
