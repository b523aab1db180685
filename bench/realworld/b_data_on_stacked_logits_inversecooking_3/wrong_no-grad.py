"""The decoder returns torch.stack(logits, 1).data: the recipe loss is cut from the graph and the decoder never trains

source: https://github.com/facebookresearch/inversecooking/issues/3
symptom: none-grad
rule: GF205
shape: nn.Module decoder with a greedy sampling loop; total loss = recipe loss + ingredient loss
wrong: no-grad
why: samples the decoder under torch.no_grad() (the logits are only sampled anyway) and re-enables grad on the stacked logits, so the decoder still gets no gradient
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class TransformerDecoder(nn.Module):
    def __init__(self, embed_size, vocab_size, max_len=4):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, embed_size)
        self.cell = nn.GRUCell(embed_size, embed_size)
        self.linear = nn.Linear(embed_size, vocab_size)
        self.max_len = max_len

    def sample(self, features, first_token):
        logits = []
        h = features
        it = first_token
        for i in range(self.max_len):
            h = self.cell(self.embed(it), h)
            outputs = self.linear(h)
            logits.append(outputs)
            it = outputs.argmax(-1)
        logits = torch.stack(logits, 1)
        return logits


torch.manual_seed(0)
encoder = nn.Linear(10, 8)
ingr_head = nn.Linear(8, 5)
decoder = TransformerDecoder(8, 12)
image = torch.randn(2, 10)
recipe = torch.randint(0, 12, (2, 4))
ingrs = torch.rand(2, 5).round()

features = encoder(image)
with torch.no_grad():
    logits = decoder.sample(features, torch.zeros(2, dtype=torch.long))
logits.requires_grad_()
recipe_loss = F.cross_entropy(logits.reshape(-1, 12), recipe.reshape(-1))
ingr_loss = F.binary_cross_entropy_with_logits(ingr_head(features), ingrs)
loss = recipe_loss + ingr_loss
loss.backward()
print("loss:", round(loss.item(), 4))
print("decoder.linear.weight.grad is None:", decoder.linear.weight.grad is None)
