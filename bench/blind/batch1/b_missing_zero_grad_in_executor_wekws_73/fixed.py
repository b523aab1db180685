"""Executor.train calls loss.backward() and optimizer.step() for every batch but never zeroes the gradients, so each step uses the sum of all previous batches' gradients.

source: https://github.com/wenet-e2e/wekws/pull/73
symptom: silent
rule: ?
shape: training loop inside a class method (Executor.train) with max-pooling keyword-spotting loss, gradient clipping and Adam
"""
import torch
import torch.nn as nn
from torch.nn.utils import clip_grad_norm_

torch.manual_seed(0)


def padding_mask(lengths):
    batch_size = lengths.size(0)
    max_len = int(lengths.max().item())
    seq_range = torch.arange(0, max_len, dtype=torch.long)
    seq_range = seq_range.unsqueeze(0).expand(batch_size, max_len)
    return seq_range >= lengths.unsqueeze(1)


def max_pooling_loss(logits, target, lengths, min_duration=0):
    mask = padding_mask(lengths)
    num_utts = logits.size(0)
    num_keywords = logits.size(2)
    loss = 0.0
    for i in range(num_utts):
        for j in range(num_keywords):
            if target[i] == j:
                prob = logits[i, :, j]
                m = mask[i].clone().detach()
                m[:min_duration] = True
                prob = prob.masked_fill(m, 0.0)
                prob = torch.clamp(prob, 1e-8, 1.0)
                loss += -torch.log(prob.max())
            else:
                prob = 1 - logits[i, :, j]
                prob = prob.masked_fill(mask[i], 1.0)
                prob = torch.clamp(prob, 1e-8, 1.0)
                loss += -torch.log(prob.min())
    loss = loss / num_utts
    return loss, 0.0


def criterion(loss_type, logits, target, lengths):
    return max_pooling_loss(logits, target, lengths)


class KWSModel(nn.Module):
    def __init__(self, idim=10, hdim=16, num_keywords=2):
        super().__init__()
        self.backbone = nn.GRU(idim, hdim, batch_first=True)
        self.classifier = nn.Linear(hdim, num_keywords)

    def forward(self, feats):
        h, _ = self.backbone(feats)
        return torch.sigmoid(self.classifier(h))


class Executor:
    def __init__(self):
        self.step = 0

    def train(self, model, optimizer, data_loader, device, writer, args):
        ''' Train one epoch
        '''
        model.train()
        clip = args.get('grad_clip', 50.0)
        for batch_idx, batch in enumerate(data_loader):
            key, feats, target, feats_lengths = batch
            feats = feats.to(device)
            target = target.to(device)
            feats_lengths = feats_lengths.to(device)
            num_utts = feats_lengths.size(0)
            if num_utts == 0:
                continue
            logits = model(feats)
            loss_type = args.get('criterion', 'max_pooling')
            loss, acc = criterion(loss_type, logits, target, feats_lengths)
            optimizer.zero_grad()
            loss.backward()
            grad_norm = clip_grad_norm_(model.parameters(), clip)
            if torch.isfinite(grad_norm):
                optimizer.step()
        return loss, grad_norm


model = KWSModel()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
data_loader = []
for b in range(4):
    lengths = torch.tensor([12, 9, 7, 12])
    data_loader.append((None, torch.randn(4, 12, 10), torch.tensor([0, 1, -1, 0]), lengths))

executor = Executor()
for epoch in range(2):
    loss, grad_norm = executor.train(model, optimizer, data_loader, torch.device('cpu'), None, {'grad_clip': 5.0})

print("loss", round(loss.item(), 4))
print("grad norm", round(grad_norm.item(), 4))
print("classifier weight norm", round(model.classifier.weight.norm().item(), 4))
