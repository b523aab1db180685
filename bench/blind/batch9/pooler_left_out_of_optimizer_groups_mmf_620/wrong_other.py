"""The optimizer parameter groups for a fine-tuned BERT-style model list the encoder and the classifier, but the pooler (moved out of the classifier) is in neither group, so it is never updated.

source: https://github.com/facebookresearch/mmf/pull/620
symptom: no-training
rule: ?
shape: nn.Module with encoder / pooler / classifier submodules, get_optimizer_parameters building lr groups (finetune_lr_multiplier), AdamW loop over several steps
wrong: other
why: putting the pooler into the classifier group makes it train, but at the head learning rate instead of the finetune learning rate that every non-classifier layer should get.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class Pooler(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.dense = nn.Linear(hidden, hidden)

    def forward(self, h):
        return torch.tanh(self.dense(h[:, 0]))


class TinyBertClassifier(nn.Module):
    def __init__(self, vocab=50, hidden=16, num_labels=3):
        super().__init__()
        self.bert = nn.Sequential(nn.Embedding(vocab, hidden), nn.Linear(hidden, hidden), nn.GELU())
        self.pooler = Pooler(hidden)
        self.classifier = nn.Sequential(nn.Dropout(0.0), nn.Linear(hidden, num_labels))

    def forward(self, ids):
        return self.classifier(self.pooler(self.bert(ids)))

    def get_optimizer_parameters(self, lr, finetune_lr_multiplier):
        return [
            {"params": list(self.classifier.parameters()) + list(self.pooler.parameters()), "lr": lr},
            {"params": self.bert.parameters(), "lr": lr * finetune_lr_multiplier},
        ]


model = TinyBertClassifier()
opt = torch.optim.AdamW(model.get_optimizer_parameters(lr=1e-2, finetune_lr_multiplier=0.1), weight_decay=0.0)
ids = torch.randint(0, 50, (24, 7))
labels = torch.randint(0, 3, (24,))
p0 = model.pooler.dense.weight.detach().clone()
for step in range(15):
    opt.zero_grad()
    loss = F.cross_entropy(model(ids), labels)
    loss.backward()
    opt.step()
print("loss", round(loss.item(), 4))
print("pooler_drift", round((model.pooler.dense.weight - p0).norm().item(), 4))
print("pooler_grad", round(model.pooler.dense.weight.grad.norm().item(), 4))
