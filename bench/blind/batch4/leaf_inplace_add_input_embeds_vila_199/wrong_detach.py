"""With the LLM frozen and enable_input_require_grads's hook marking the embedding output as requiring grad, text_embeds is a leaf that requires grad, and the dummy-media workaround adds to it in place, which autograd forbids.

source: https://github.com/NVlabs/VILA/pull/199
symptom: error
rule: ?
shape: vision-language model: vision tower + mm projector (trainable), frozen LLM embedding with a forward hook that calls output.requires_grad_(True), LoRA-style adapter; _embed() consumes dummy media embeddings by adding sum(dummy)*0 to the text embeddings
wrong: detach
why: adding through .data silences the leaf check but drops the dummy term from the graph, so the vision tower and projector get no gradient (None instead of zeros) and, under DDP, their gradients are never reduced.
"""
import torch
import torch.nn as nn

torch.manual_seed(0)


class LlavaLike(nn.Module):
    def __init__(self, vocab=20, d=8):
        super().__init__()
        self.vision_tower = nn.Linear(12, d)
        self.mm_projector = nn.Linear(d, d)
        self.embed_tokens = nn.Embedding(vocab, d)
        self.embed_tokens.requires_grad_(False)
        self.lora = nn.Linear(d, d, bias=False)
        self.lm_head = nn.Linear(d, vocab)
        self.lm_head.requires_grad_(False)
        # what transformers' enable_input_require_grads() installs for gradient checkpointing
        self.embed_tokens.register_forward_hook(lambda m, i, o: o.requires_grad_(True))

    def _embed(self, input_ids, dummy_images):
        text_embeds = self.embed_tokens(input_ids)
        dummy_embed = self.mm_projector(self.vision_tower(dummy_images))
        text_embeds.data += torch.sum(dummy_embed).data * 0
        return text_embeds

    def forward(self, input_ids, dummy_images):
        h = self._embed(input_ids, dummy_images)
        h = h + self.lora(h)
        return self.lm_head(h)


model = LlavaLike()
ids = torch.randint(0, 20, (2, 5))
dummy = torch.zeros(1, 12)
logits = model(ids, dummy)
loss = nn.functional.cross_entropy(logits[:, :-1].reshape(-1, 20), ids[:, 1:].reshape(-1))
loss.backward()
g = model.vision_tower.weight.grad
print("loss", round(loss.item(), 4))
print("lora grad", round(model.lora.weight.grad.norm().item(), 4))
print("vision tower grad", None if g is None else round(g.norm().item(), 4))
