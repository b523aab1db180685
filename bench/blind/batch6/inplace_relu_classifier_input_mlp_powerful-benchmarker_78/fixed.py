"""The classifier MLP starts with ReLU(inplace=True), which overwrites the embeddings that the metric loss already saved for backward, so backward fails with an in-place modification error.

source: https://github.com/KevinMusgrave/powerful-benchmarker/issues/78
symptom: error
rule: ?
shape: metric-learning library: trunk + embedder MLP, classifier MLP on the embeddings, normalized contrastive loss + cross-entropy (TrainWithClassifier)
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class MLP(nn.Module):
    def __init__(self, layer_sizes, final_relu=False):
        super().__init__()
        layer_list = []
        num_layers = len(layer_sizes) - 1
        final_relu_layer = num_layers if final_relu else num_layers - 1
        for i in range(num_layers):
            if i < final_relu_layer:
                layer_list.append(nn.ReLU(inplace=False))
            layer_list.append(nn.Linear(layer_sizes[i], layer_sizes[i + 1]))
        self.net = nn.Sequential(*layer_list)

    def forward(self, x):
        return self.net(x)


def contrastive_loss(emb, labels, margin=0.5):
    emb = F.normalize(emb, dim=1)
    sim = emb @ emb.t()
    same = labels[:, None] == labels[None, :]
    eye = torch.eye(len(labels), dtype=torch.bool)
    pos = (1 - sim)[same & ~eye].mean()
    neg = F.relu(sim - margin)[~same].mean()
    return pos + neg


class TrainWithClassifier:
    def __init__(self, trunk, embedder, classifier):
        self.trunk, self.embedder, self.classifier = trunk, embedder, classifier

    def calculate_loss(self, x, labels):
        embeddings = self.embedder(self.trunk(x))
        metric = contrastive_loss(embeddings, labels)
        logits = self.classifier(embeddings)
        return metric + F.cross_entropy(logits, labels)


trunk = nn.Sequential(nn.Linear(10, 16), nn.ReLU())
embedder = MLP([16, 8])
classifier = MLP([8, 8, 3])
trainer = TrainWithClassifier(trunk, embedder, classifier)
x = torch.randn(12, 10)
labels = torch.arange(12) % 3
loss = trainer.calculate_loss(x, labels)
loss.backward()
print("loss", round(loss.item(), 4))
print("trunk grad", round(trunk[0].weight.grad.norm().item(), 4))
print("embedder grad", round(embedder.net[0].weight.grad.norm().item(), 4))
