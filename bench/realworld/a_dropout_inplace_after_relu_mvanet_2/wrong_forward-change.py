"""Model __init__ flips every nn.ReLU / nn.Dropout to `inplace = True`; the FFN's dropout then overwrites a relu output

source: https://github.com/qianyu-dlut/MVANet/issues/2
symptom: error
rule: GF204
shape: nn.Module __init__ loop over self.modules() setting `m.inplace = True`; transformer FFN `linear2(dropout(activation(linear1(src))))`
wrong: forward-change
why: keeps the layers in place and sets the dropout probability to 0, so the training forward no longer applies dropout
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


def get_activation_fn(activation):
    """Return an activation function given a string"""
    if activation == "relu":
        return F.relu
    if activation == "gelu":
        return F.gelu
    raise RuntimeError(F"activation should be relu/gelu, not {activation}.")


class TransformerEncoderLayer(nn.Module):
    def __init__(self, d_model, nhead, dim_feedforward=64, dropout=0.1):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(d_model, nhead, dropout=dropout)
        self.linear1 = nn.Linear(d_model, dim_feedforward)
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(dim_feedforward, d_model)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.activation = get_activation_fn('relu')

    def forward(self, src):
        src2 = self.self_attn(src, src, value=src)[0]
        src = src + self.dropout1(src2)
        src = self.norm1(src)
        src2 = self.linear2(self.dropout(self.activation(self.linear1(src))))
        src = src + self.dropout2(src2)
        src = self.norm2(src)
        return src


class MVANet(nn.Module):
    def __init__(self, d_model=16):
        super().__init__()
        self.proj = nn.Sequential(nn.Linear(8, d_model), nn.ReLU())
        self.layer = TransformerEncoderLayer(d_model, nhead=2)
        self.head = nn.Linear(d_model, 1)
        for m in self.modules():
            if isinstance(m, nn.ReLU) or isinstance(m, nn.Dropout):
                m.inplace = True
                if isinstance(m, nn.Dropout):
                    m.p = 0.0

    def forward(self, x):
        return self.head(self.layer(self.proj(x)))


torch.manual_seed(0)
model = MVANet()
model.train()
x = torch.randn(6, 2, 8)
loss = model(x).pow(2).mean()
loss.backward()
print(round(loss.item(), 4), round(model.layer.linear1.weight.grad.norm().item(), 4))
