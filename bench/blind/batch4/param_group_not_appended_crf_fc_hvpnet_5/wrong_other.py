"""The trainer builds per-module parameter groups for the optimizer but forgets to append the group holding the CRF and fc parameters, so the tagging head is never updated.

source: https://github.com/zjunlp/HVPNeT/issues/5
symptom: no-training
rule: ?
shape: NER trainer class: model with a text encoder, visual prompt module, fc emission layer and a CRF-like transition module; before_train() assembles optimizer parameter groups by module name; three AdamW steps
wrong: other
why: moving the CRF and fc parameters into the first (encoder) group gets them into the optimizer, but with the encoder's 1e-5 learning rate instead of the head's 0.05, so the head barely moves.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class CRF(nn.Module):
    def __init__(self, num_tags):
        super().__init__()
        self.transitions = nn.Parameter(torch.randn(num_tags, num_tags) * 0.1)

    def forward(self, emissions, tags):  # pairwise-local likelihood of the gold path
        prev = torch.cat([tags[:, :1], tags[:, :-1]], dim=1)
        scores = emissions + self.transitions[prev]
        return F.cross_entropy(scores.reshape(-1, scores.shape[-1]), tags.reshape(-1))


class HMNeTNERModel(nn.Module):
    def __init__(self, vocab=30, hidden=16, num_tags=5):
        super().__init__()
        self.bert = nn.Sequential(nn.Embedding(vocab, hidden), nn.Linear(hidden, hidden), nn.Tanh())
        self.prompt = nn.Linear(8, hidden)
        self.fc = nn.Linear(hidden, num_tags)
        self.crf = CRF(num_tags)

    def forward(self, ids, images, tags):
        h = self.bert(ids) + self.prompt(images).unsqueeze(1)
        return self.crf(self.fc(h), tags)


class NERTrainer:
    def __init__(self, model, lr=0.05, bert_lr=1e-5):
        self.model, self.lr, self.bert_lr = model, lr, bert_lr

    def before_train(self):
        parameters = []
        params = {"lr": self.bert_lr, "weight_decay": 1e-2, "params": []}
        for name, param in self.model.named_parameters():
            if "bert" in name or "crf" in name or name.startswith("fc"):
                params["params"].append(param)
        parameters.append(params)
        params = {"lr": self.lr, "weight_decay": 1e-2, "params": []}
        for name, param in self.model.named_parameters():
            if "prompt" in name:
                params["params"].append(param)
        parameters.append(params)
        params = {"lr": self.lr, "weight_decay": 1e-2, "params": []}
        for name, param in self.model.named_parameters():
            if "crf" in name or name.startswith("fc"):
                params["params"].append(param)
        self.optimizer = torch.optim.AdamW(parameters)

    def train(self, batch, steps=3):
        self.before_train()
        for _ in range(steps):
            self.optimizer.zero_grad()
            loss = self.model(*batch)
            loss.backward()
            self.optimizer.step()
        return self.model(*batch)


model = HMNeTNERModel()
fc0 = model.fc.weight.detach().clone()
batch = (torch.randint(0, 30, (4, 7)), torch.randn(4, 8), torch.randint(0, 5, (4, 7)))
loss = NERTrainer(model).train(batch)
print("loss", round(loss.item(), 4))
print("fc weight change", round((model.fc.weight - fc0).norm().item(), 4))
print("transitions sum", round(model.crf.transitions.sum().item(), 4))
