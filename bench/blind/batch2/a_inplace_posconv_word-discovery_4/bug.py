"""The audio encoder adds the positional convolution to its input with `x += x_conv`, overwriting the tensor the convolution saved for backward.

source: https://github.com/jasonppy/word-discovery/pull/4
symptom: error
rule: ?
shape: nn.Module audio encoder (conv feature extractor, weight-normed positional conv, encoder layer) trained with Adam for two steps
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class SamePad(nn.Module):
    def __init__(self, kernel_size):
        super().__init__()
        self.remove = 1 if kernel_size % 2 == 0 else 0

    def forward(self, x):
        if self.remove > 0:
            x = x[:, :, : -self.remove]
        return x


class AudioEncoder(nn.Module):
    def __init__(self, dim=16, conv_pos=4):
        super().__init__()
        self.feature_extractor = nn.Sequential(nn.Conv1d(1, 8, 10, stride=5), nn.GELU())
        self.layer_norm = nn.LayerNorm(8)
        self.post_extract_proj = nn.Linear(8, dim)
        self.dropout_input = nn.Dropout(0.1)
        pos_conv = nn.Conv1d(dim, dim, kernel_size=conv_pos, padding=conv_pos // 2, groups=2)
        nn.init.normal_(pos_conv.weight, mean=0, std=0.2)
        nn.init.constant_(pos_conv.bias, 0)
        pos_conv = nn.utils.parametrizations.weight_norm(pos_conv, name="weight", dim=2)
        self.pos_conv = nn.Sequential(pos_conv, SamePad(conv_pos), nn.GELU())
        self.encoder = nn.TransformerEncoderLayer(dim, 2, 32, dropout=0.0, batch_first=True)

    def forward(self, source):
        features = self.feature_extractor(source.unsqueeze(1))
        features = features.transpose(1, 2)
        features = self.layer_norm(features)
        features = self.post_extract_proj(features)
        features = self.dropout_input(features)

        x = features
        x_conv = self.pos_conv(x.transpose(1, 2))
        x_conv = x_conv.transpose(1, 2)
        x += x_conv  # bench: bug
        return self.encoder(x)


model = AudioEncoder()
head = nn.Linear(16, 3)
opt = torch.optim.Adam(list(model.parameters()) + list(head.parameters()), lr=1e-3)
wav = torch.randn(4, 200)
labels = torch.randint(0, 3, (4,))

for step in range(2):
    opt.zero_grad()
    feats = model(wav)
    loss = F.cross_entropy(head(feats.mean(1)), labels)
    loss.backward()
    opt.step()



def grad_norm(p):
    return None if p.grad is None else round(p.grad.norm().item(), 4)


print("loss", round(loss.item(), 4))
print("pos_conv grad norm", grad_norm(model.pos_conv[0].parametrizations.weight.original1))
print("extractor grad norm", grad_norm(model.feature_extractor[0].weight))
