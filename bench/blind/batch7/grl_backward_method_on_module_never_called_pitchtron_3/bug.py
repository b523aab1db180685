"""The gradient reversal layer is an nn.Module with a backward() method, which autograd never calls, so the speaker classifier's gradient reaches the text encoder un-reversed and the encoder learns to help speaker classification instead of removing speaker information.

source: https://github.com/hash2430/pitchtron/issues/3
symptom: silent
rule: ?
shape: TTS text encoder (nn.Module with Embedding/Conv) plus a speaker-adversarial classifier behind a gradient reversal layer, one backward of the joint loss
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)

class GradientReversalLayer(nn.Module):
    def forward(self, x):
        return x

    def backward(self, grad_output):  # bench: bug
        return -1 * grad_output


def gradient_reversal_layer(x):
    return GradientReversalLayer()(x)


class Classifier(nn.Module):
    def __init__(self, text_embedding_dim, hidden_dim, num_speakers):
        super().__init__()
        self.hidden = nn.Linear(text_embedding_dim, hidden_dim)
        self.output = nn.Linear(hidden_dim, num_speakers)

    def forward(self, x):
        return self.output(F.relu(self.hidden(x)))


class TextEncoder(nn.Module):
    def __init__(self, vocab, dim):
        super().__init__()
        self.embedding = nn.Embedding(vocab, dim)
        self.conv = nn.Conv1d(dim, dim, 3, padding=1)

    def forward(self, text):
        return torch.tanh(self.conv(self.embedding(text).transpose(1, 2))).transpose(1, 2)


encoder = TextEncoder(30, 16)
decoder = nn.Linear(16, 8)
speaker_clf = Classifier(16, 32, 4)
text = torch.randint(0, 30, (4, 10))
mel = torch.randn(4, 10, 8)
speakers = torch.randint(0, 4, (4,))
h = encoder(text)
mel_loss = F.mse_loss(decoder(h), mel)
spk_logits = speaker_clf(gradient_reversal_layer(h).mean(1))
spk_loss = F.cross_entropy(spk_logits, speakers)
(mel_loss + 0.5 * spk_loss).backward()
print("mel loss", round(mel_loss.item(), 4))
print("spk loss", round(spk_loss.item(), 4))
print("encoder grad", round(encoder.conv.weight.grad.norm().item(), 4))
print("classifier grad", round(speaker_clf.hidden.weight.grad.norm().item(), 4))
