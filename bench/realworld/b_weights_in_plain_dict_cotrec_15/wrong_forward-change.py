"""Graph-convolution weights kept in a plain Python dict: parameters() never sees them, so the optimizer never trains them

source: https://github.com/xiaxin1998/COTREC/issues/15
symptom: no-training
rule: none
shape: nn.Module (ItemConv) with per-layer nn.Linear weights stored in a dict built in __init__
wrong: forward-change
why: replaces the dict of per-layer linears by one registered linear shared by all layers, so the layers no longer have separate weights
"""
import torch
import torch.nn as nn


class ItemConv(nn.Module):
    def __init__(self, layers, emb_size=8):
        super(ItemConv, self).__init__()
        self.emb_size = emb_size
        self.layers = layers
        self.w_item = nn.Linear(self.emb_size, self.emb_size, bias=False)

    def forward(self, adjacency, embedding):
        item_embeddings = embedding
        final = [item_embeddings]
        for i in range(self.layers):
            item_embeddings = self.w_item(item_embeddings)
            item_embeddings = torch.sparse.mm(adjacency, item_embeddings)
            final.append(item_embeddings)
        return torch.stack(final).mean(0)


torch.manual_seed(0)
model = ItemConv(layers=2)
adjacency = torch.eye(5).to_sparse()
embedding = nn.Parameter(torch.randn(5, 8))  # item embedding table, trained too
target = torch.randn(5, 8)
before = model.w_item.weight.detach().clone()
optimizer = torch.optim.SGD(list(model.parameters()) + [embedding], lr=0.1)
loss = ((model(adjacency, embedding) - target) ** 2).mean()
optimizer.zero_grad()
loss.backward()
optimizer.step()
print("registered parameters:", len(list(model.parameters())))
print("layer 0 weight changed:", not torch.equal(before, model.w_item.weight))
