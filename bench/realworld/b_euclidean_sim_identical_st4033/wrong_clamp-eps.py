"""Triplet loss on Euclidean similarity: identical anchor and positive embeddings give a zero distance and nan gradients

source: https://github.com/huggingface/sentence-transformers/pull/4033
symptom: nan-grad
rule: GF303
shape: similarity helper used by a TripletLoss-style nn.Module around a small encoder
wrong: clamp-eps
why: keeps sqrt and zeroes the nan gradient with torch.nan_to_num, but the nan from the identical pair has already spread to every weight entry, so the whole gradient becomes 0
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


def euclidean_sim(a, b):
    return -torch.sqrt(torch.sum((a - b) ** 2, dim=-1))


class TripletLoss(nn.Module):
    def __init__(self, model, triplet_margin=5.0):
        super().__init__()
        self.model = model
        self.triplet_margin = triplet_margin

    def forward(self, anchor, positive, negative):
        rep_anchor = self.model(anchor)
        rep_pos = self.model(positive)
        rep_neg = self.model(negative)
        distance_pos = -euclidean_sim(rep_anchor, rep_pos)
        distance_neg = -euclidean_sim(rep_anchor, rep_neg)
        losses = F.relu(distance_pos - distance_neg + self.triplet_margin)
        return losses.mean()


torch.manual_seed(0)
encoder = nn.Linear(8, 4)
loss_fct = TripletLoss(encoder)
anchor = torch.randn(3, 8)
positive = anchor.clone()  # duplicated texts in the batch: identical embeddings
negative = torch.randn(3, 8)
loss = loss_fct(anchor, positive, negative)
loss.backward()
encoder.weight.grad = torch.nan_to_num(encoder.weight.grad)  # sqrt at 0 gives nan for duplicated texts
print(round(loss.item(), 4))
print("weight grad has nan:", bool(torch.isnan(encoder.weight.grad).any()))
