"""The transcription model normalises the weighted onset/offset losses by the sum of the frame weights, which is 0 for a clip without onsets, so 0/0 makes the loss and every gradient nan.

source: https://github.com/york135/CTC_CE_for_AST/issues/3
symptom: nan-grad
rule: ?
shape: singing-transcription model (GRU encoder, onset/offset/pitch heads) with weighted BCE + CE losses computed in a training-step method
"""
import torch
import torch.nn as nn

torch.manual_seed(0)


class AST(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.GRU(8, 16, batch_first=True)
        self.on_off = nn.Linear(16, 3)
        self.pitch = nn.Linear(16, 12)
        self.onset_criterion = nn.BCELoss(reduction="none")
        self.offset_criterion = nn.BCELoss(reduction="none")
        self.pitch_criterion = nn.CrossEntropyLoss()

    def step_loss(self, feats, onset_prob, offset_prob, pitch_class, on_weight, off_weight):
        h, _ = self.rnn(feats)
        sm = self.on_off(h).softmax(-1)
        onset_logits = torch.clip(sm[:, :, 1], min=1e-7, max=1 - 1e-7)
        offset_logits = torch.clip(sm[:, :, 2], min=1e-7, max=1 - 1e-7)
        loss0 = torch.dot(self.onset_criterion(onset_logits, onset_prob)[0], on_weight[0]) / torch.clip(torch.sum(on_weight), min=1e-10)
        loss1 = torch.dot(self.offset_criterion(offset_logits, offset_prob)[0], off_weight[0]) / torch.clip(torch.sum(off_weight), min=1e-10)
        loss3 = self.pitch_criterion(self.pitch(h).permute(0, 2, 1), pitch_class)
        return loss0 + loss1 + loss3


model = AST()
T = 10
grads = []
for clip in range(2):
    feats = torch.randn(1, T, 8)
    onset = torch.zeros(1, T)
    offset = torch.zeros(1, T)
    w = torch.zeros(1, T)
    if clip == 1:
        onset[0, 2] = offset[0, 7] = 1.0
        w[0, 1:4] = 0.5
    pitch_class = torch.randint(0, 12, (1, T))
    model.zero_grad()
    loss = model.step_loss(feats, onset, offset, pitch_class, w, w)
    loss.backward()
    grads.append(round(model.on_off.weight.grad.norm().item(), 4))
print("loss", round(loss.item(), 4))
print("on_off grad per clip", grads)
print("pitch grad", round(model.pitch.weight.grad.norm().item(), 4))
