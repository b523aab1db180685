"""With the embeddings and the first encoder layer frozen, gradient checkpointing wraps each encoder layer in the reentrant torch.utils.checkpoint, whose output does not require grad when no input does, so the trainable encoder layers get no gradient.

source: https://github.com/huggingface/transformers/issues/21381
symptom: none-grad
rule: ?
shape: BERT-style encoder (nn.Module with embeddings, ModuleList of layers, pooler, classifier), partial freezing, gradient checkpointing per layer, AdamW fine-tuning loop over several steps
"""
import warnings

import torch
import torch.nn as nn
import torch.utils.checkpoint

warnings.filterwarnings("ignore")
torch.manual_seed(0)


class Embeddings(nn.Module):
    def __init__(self, vocab, dim):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab, dim)
        self.position_embeddings = nn.Embedding(16, dim)
        self.LayerNorm = nn.LayerNorm(dim)

    def forward(self, input_ids):
        pos = torch.arange(input_ids.shape[1])
        return self.LayerNorm(self.word_embeddings(input_ids) + self.position_embeddings(pos))


class Layer(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.attention = nn.Linear(dim, dim)
        self.intermediate = nn.Linear(dim, 2 * dim)
        self.output = nn.Linear(2 * dim, dim)
        self.LayerNorm = nn.LayerNorm(dim)

    def forward(self, hidden_states, attention_mask):
        ctx = torch.softmax(hidden_states @ hidden_states.transpose(1, 2) + attention_mask, -1) @ self.attention(hidden_states)
        h = hidden_states + ctx
        return self.LayerNorm(h + self.output(nn.functional.gelu(self.intermediate(h))))


class Encoder(nn.Module):
    def __init__(self, dim, n_layers):
        super().__init__()
        self.layer = nn.ModuleList([Layer(dim) for _ in range(n_layers)])
        self.gradient_checkpointing = False

    def forward(self, hidden_states, attention_mask):
        for layer_module in self.layer:
            if self.gradient_checkpointing and self.training:

                def create_custom_forward(module):
                    def custom_forward(*inputs):
                        return module(*inputs)

                    return custom_forward

                hidden_states = torch.utils.checkpoint.checkpoint(  # bench: bug
                    create_custom_forward(layer_module), hidden_states, attention_mask, use_reentrant=True  # bench: bug
                )  # bench: bug
            else:
                hidden_states = layer_module(hidden_states, attention_mask)
        return hidden_states


class BertForSequenceClassification(nn.Module):
    def __init__(self, vocab=50, dim=16, n_layers=3, num_labels=2):
        super().__init__()
        self.embeddings = Embeddings(vocab, dim)
        self.encoder = Encoder(dim, n_layers)
        self.pooler = nn.Linear(dim, dim)
        self.classifier = nn.Linear(dim, num_labels)

    def gradient_checkpointing_enable(self):
        self.encoder.gradient_checkpointing = True

    def forward(self, input_ids, attention_mask):
        ext_mask = (1.0 - attention_mask[:, None, :].float()) * -10000.0
        h = self.encoder(self.embeddings(input_ids), ext_mask)
        return self.classifier(torch.tanh(self.pooler(h[:, 0])))


model = BertForSequenceClassification()
model.gradient_checkpointing_enable()
for module in [model.embeddings, model.encoder.layer[0]]:
    for p in module.parameters():
        p.requires_grad = False
model.train()

input_ids = torch.randint(0, 50, (16, 8))
attention_mask = torch.ones(16, 8, dtype=torch.long)
labels = (input_ids[:, 1] > 25).long()
opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
w0 = model.encoder.layer[2].output.weight.detach().clone()
for step in range(8):
    opt.zero_grad()
    loss = nn.functional.cross_entropy(model(input_ids, attention_mask), labels)
    loss.backward()
    if step == 0:
        g = model.encoder.layer[2].output.weight.grad
        print("layer2_grad_is_none", g is None)
    opt.step()
print("loss", round(loss.item(), 4))
print("layer2_drift", round((model.encoder.layer[2].output.weight - w0).norm().item(), 4))
