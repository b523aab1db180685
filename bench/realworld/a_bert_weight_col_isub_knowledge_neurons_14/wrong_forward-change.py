"""Knowledge editing subtracts an embedding from a column of a BERT FFN weight in place, outside no_grad

source: https://github.com/Hunter-DDM/knowledge-neurons/issues/14
symptom: error
rule: GF201
shape: script editing `model.bert.encoder.layer[layer].output.dense.weight[:, pos] -= ...` in a loop over neurons
wrong: forward-change
why: edits a clone of the weight, so the in-place error goes away but the model's weight is never changed and the edited model computes the old logits
"""
import torch
import torch.nn as nn


class Output(nn.Module):
    def __init__(self, d_ff, d_model):
        super().__init__()
        self.dense = nn.Linear(d_ff, d_model)


class Layer(nn.Module):
    def __init__(self, d_model, d_ff):
        super().__init__()
        self.intermediate = nn.Linear(d_model, d_ff)
        self.output = Output(d_ff, d_model)

    def forward(self, h):
        return h + self.output.dense(torch.relu(self.intermediate(h)))


class Encoder(nn.Module):
    def __init__(self, n_layers, d_model, d_ff):
        super().__init__()
        self.layer = nn.ModuleList([Layer(d_model, d_ff) for _ in range(n_layers)])


class Bert(nn.Module):
    def __init__(self, vocab, d_model=8, d_ff=16, n_layers=2):
        super().__init__()
        self.embeddings = nn.Embedding(vocab, d_model)
        self.encoder = Encoder(n_layers, d_model, d_ff)

    def forward(self, ids):
        h = self.embeddings(ids)
        for layer in self.encoder.layer:
            h = layer(h)
        return h


class BertForMaskedLM(nn.Module):
    def __init__(self, vocab):
        super().__init__()
        self.bert = Bert(vocab)
        self.cls = nn.Linear(8, vocab)

    def forward(self, ids):
        return self.cls(self.bert(ids))


torch.manual_seed(0)
model = BertForMaskedLM(30)
word_embeddings = model.cls.weight  # [vocab, d_model], tied-style output embeddings
ori_pred_emb = word_embeddings[3]
tgt_emb = word_embeddings[7]
kn_bag = [[0, 2], [1, 5], [1, 9]]
lambda_list_1 = [1.0, 1.0, 1.0]
lambda_list_2 = [2.0, 2.0, 2.0]

for i, (layer, pos) in enumerate(kn_bag):
    weight = model.bert.encoder.layer[layer].output.dense.weight.clone()
    weight[:, pos] -= ori_pred_emb * lambda_list_1[i]
    weight[:, pos] += tgt_emb * lambda_list_2[i]

ids = torch.tensor([[1, 4, 6, 2]])
logits = model(ids)
print(logits[0, 1].argmax().item(), round(logits.norm().item(), 4))
